#include "train/train_step.h"

#include <ATen/autocast_mode.h>
#include <torch/nn/functional/loss.h>

#include <cmath>

namespace ht::train {

AutocastScope::AutocastScope(config::Autocast mode, const torch::Device& device)
    : enabled_(mode == config::Autocast::kBf16 && device.is_cuda()) {
  if (!enabled_) return;
  prev_ = at::autocast::is_autocast_enabled(at::kCUDA);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
}

AutocastScope::~AutocastScope() {
  if (enabled_) at::autocast::set_autocast_enabled(at::kCUDA, prev_);
}

torch::Tensor micro_batch_loss(model::Gpt& gpt, const data::Batch& batch, const torch::Device& device,
                               config::Autocast autocast) {
  AutocastScope scope(autocast, device);
  auto input = batch.input.to(device);
  auto target = batch.target.to(device);
  if (gpt->options().num_labels == 0) return model::lm_loss(gpt->lm_logits(input), target);
  auto logits = gpt->class_logits(input, batch.mask.to(device));
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), target);
}

AccumulatedLoss accumulate_gradients(model::Gpt& gpt, data::Loader& loader, int64_t grad_accum,
                                     const torch::Device& device, config::Autocast autocast,
                                     const std::function<void(bool last_micro_batch)>& before_backward) {
  AccumulatedLoss out;
  double loss_sum = 0.0;
  for (int64_t m = 0; m < grad_accum; ++m) {
    const data::Batch batch = loader.next();
    out.tokens += batch.num_tokens;
    auto loss = micro_batch_loss(gpt, batch, device, autocast);
    if (before_backward) before_backward(m == grad_accum - 1);
    (loss / static_cast<double>(grad_accum)).backward();
    loss_sum += loss.item<double>();
  }
  out.mean_loss = loss_sum / static_cast<double>(grad_accum);
  out.finite = std::isfinite(out.mean_loss);
  return out;
}

}  // namespace ht::train
