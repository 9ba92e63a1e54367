#include "train/attention_choice.h"

#include <fmt/format.h>

#include "model/gpt.h"
#include "train/train_state.h"

namespace ht::train {

std::string resolve_attention(config::Config& cfg, const torch::Device& device,
                              const std::optional<checkpoint::Snapshot>& resumed) {
  auto& kernel = cfg.model.attention;
  if (kernel != config::AttentionKernel::kAuto) return {};
  if (resumed) {
    if (const auto stored = stored_config(*resumed)) {
      kernel = stored->model.attention == config::AttentionKernel::kAuto ? config::AttentionKernel::kSdpa
                                                                          : stored->model.attention;
      return fmt::format("model.attention = auto: {} as the run started with (stored in {})", config::name_of(kernel),
                         resumed->path);
    }
  }
  const bool bf16 = cfg.train.autocast == config::Autocast::kBf16;
  kernel = model::choose_attention(device.is_cuda(), bf16, cfg.model.seq_len);
  if (kernel == config::AttentionKernel::kEager)
    return fmt::format("model.attention = auto: eager (bf16 autocast on a CPU, {} positions: the matmul formulation "
                       "trains faster here than the fused kernel, whose bf16 backward is slow on CPUs; it keeps "
                       "B x n_head x {}^2 probabilities per block)",
                       cfg.model.seq_len, cfg.model.seq_len);
  return fmt::format("model.attention = auto: sdpa ({})",
                     device.is_cuda() ? "CUDA"
                     : !bf16          ? "fp32 on a CPU"
                                      : fmt::format("{} positions, beyond the 512 where eager is faster", cfg.model.seq_len));
}

}  // namespace ht::train
