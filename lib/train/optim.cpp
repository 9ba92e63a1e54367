#include "train/optim.h"

#include <cmath>

namespace ht::train {

std::unique_ptr<AdamW> make_adamw(torch::nn::Module& model, const config::TrainConfig& cfg) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model.named_parameters()) {
    const auto& name = p.key();
    const bool is_embedding = name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0;
    const bool matmul_weight = p.value().dim() == 2 && !is_embedding;
    (matmul_weight ? decay : no_decay).push_back(p.value());
  }
  auto base = torch::optim::AdamWOptions(cfg.lr).betas({cfg.beta1, cfg.beta2}).eps(cfg.eps);
  auto with_decay = std::make_unique<torch::optim::AdamWOptions>(base);
  with_decay->weight_decay(cfg.weight_decay);
  auto without_decay = std::make_unique<torch::optim::AdamWOptions>(base);
  without_decay->weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::move(with_decay));
  groups.emplace_back(no_decay, std::move(without_decay));
  return std::make_unique<AdamW>(std::move(groups), base, cfg.optimizer_impl);
}

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

double clip_grad_norm(torch::nn::Module& model, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : model.parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.detach().to(torch::kFloat).norm(2));
  const double total = torch::stack(norms).norm(2).item<double>();
  if (max_norm > 0 && total > max_norm) {
    const double scale = max_norm / (total + 1e-6);
    torch::NoGradGuard no_grad;
    for (auto& g : grads) g.mul_(scale);
  }
  return total;
}

}  // namespace ht::train
