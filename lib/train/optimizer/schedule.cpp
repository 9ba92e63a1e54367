#include "train/optimizer/schedule.h"

#include <cmath>

namespace ht::train {

LrSchedule::LrSchedule(const config::TrainConfig& cfg, int64_t total_steps)
    : kind_(cfg.lr_schedule), lr_(cfg.lr), min_lr_(cfg.min_lr), warmup_(cfg.warmup_steps), total_(total_steps) {}

double LrSchedule::lr_at(int64_t step) const {
  if (warmup_ > 0 && step < warmup_) return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (kind_ == config::LrScheduleKind::kConstant) return lr_;
  const int64_t decay_steps = std::max<int64_t>(1, total_ - warmup_);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_) / static_cast<double>(decay_steps));
  const double coeff = kind_ == config::LrScheduleKind::kCosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return min_lr_ + coeff * (lr_ - min_lr_);
}

double LrSchedule::apply(torch::optim::Optimizer& opt, int64_t step) const {
  const double lr = lr_at(step);
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
  return lr;
}

// The norm of the per-tensor norms, as torch.nn.utils.clip_grad_norm_ computes it.
double grad_norm_squared(const std::vector<torch::Tensor>& grads) {
  if (grads.empty()) return 0.0;
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.detach().to(torch::kFloat).norm(2));
  const double total = torch::stack(norms).norm(2).item<double>();
  return total * total;
}

void clip_to_norm(const std::vector<torch::Tensor>& grads, double total_norm, double max_norm) {
  if (!(max_norm > 0 && total_norm > max_norm)) return;
  const double scale = max_norm / (total_norm + 1e-6);
  torch::NoGradGuard no_grad;
  for (const auto& g : grads) g.mul_(scale);
}

double clip_grad_norm(torch::nn::Module& model, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : model.parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.detach().to(torch::kFloat).norm(2));
  const double total = torch::stack(norms).norm(2).item<double>();
  clip_to_norm(grads, total, max_norm);
  return total;
}

}  // namespace ht::train
