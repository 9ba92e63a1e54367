#include "train/accelerator.h"

#include "core/error.h"

namespace ht::train {

Accelerator::Accelerator(int64_t grad_accum_steps) : grad_accum_steps_(grad_accum_steps) {
  HT_REQUIRE(grad_accum_steps >= 1, ExitCode::kUsage, "grad_accum_steps must be >= 1, got {}", grad_accum_steps);
}

void Accelerator::backward(const torch::Tensor& loss) { (loss / static_cast<double>(grad_accum_steps_)).backward(); }

}  // namespace ht::train
