// AdamW kernels (see adamw.h).
#include "train/optimizer/adamw.h"

#include <ATen/ATen.h>

#include <cmath>

namespace ht::train {

AdamW::AdamW(std::vector<OptimizerParam> params, const config::TrainConfig& cfg)
    : Optimizer(std::move(params), cfg),
      impl_(cfg.optimizer_impl == config::OptimizerImpl::kAuto ? config::OptimizerImpl::kFused : cfg.optimizer_impl) {}

const std::vector<std::string>& AdamW::moment_names() const {
  static const std::vector<std::string> names = {"exp_avg", "exp_avg_sq"};
  return names;
}

void AdamW::update(Batch& batch, const GroupOptions& group) {
  switch (impl_) {
    case config::OptimizerImpl::kPlain: return update_plain(batch, group);
    case config::OptimizerImpl::kForeach: return update_foreach(batch, group);
    default: return update_fused(batch, group);
  }
}

// torch::optim::AdamW::step, op for op.
void AdamW::update_plain(Batch& b, const GroupOptions& group) const {
  const double beta1 = cfg().beta1, beta2 = cfg().beta2, lr = group.lr, wd = group.weight_decay;
  for (size_t i = 0; i < b.params.size(); ++i) {
    auto& p = b.params[i];
    auto& m = b.moments[0][i];
    auto& v = b.moments[1][i];
    const auto& g = b.grads[i];
    if (wd != 0) p.mul_(1 - lr * wd);
    const auto step = static_cast<double>(b.steps[i]);
    const double bias_correction1 = 1 - std::pow(beta1, step), bias_correction2 = 1 - std::pow(beta2, step);
    m.mul_(beta1).add_(g, 1 - beta1);
    v.mul_(beta2).addcmul_(g, g, 1 - beta2);
    auto denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(cfg().eps);
    p.addcdiv_(m, denom, -lr / bias_correction1);
  }
}

// The plain arithmetic over lists of tensors that share a step count.
void AdamW::update_foreach(Batch& b, const GroupOptions& group) const {
  const double beta1 = cfg().beta1, beta2 = cfg().beta2, lr = group.lr, wd = group.weight_decay;
  for (size_t begin = 0; begin < b.params.size();) {
    size_t end = begin;
    while (end < b.params.size() && b.steps[end] == b.steps[begin]) ++end;
    auto part = [&](std::vector<torch::Tensor>& v) {
      return std::vector<torch::Tensor>(v.begin() + static_cast<long>(begin), v.begin() + static_cast<long>(end));
    };
    auto params = part(b.params), grads = part(b.grads), m = part(b.moments[0]), v = part(b.moments[1]);
    const auto step = static_cast<double>(b.steps[begin]);
    const double bias_correction1 = 1 - std::pow(beta1, step), bias_correction2 = 1 - std::pow(beta2, step);
    if (wd != 0) at::_foreach_mul_(params, 1 - lr * wd);
    at::_foreach_mul_(m, beta1);
    at::_foreach_add_(m, grads, 1 - beta1);
    at::_foreach_mul_(v, beta2);
    at::_foreach_addcmul_(v, grads, grads, 1 - beta2);
    auto denom = at::_foreach_sqrt(v);
    at::_foreach_div_(denom, std::sqrt(bias_correction2));
    at::_foreach_add_(denom, cfg().eps);
    at::_foreach_addcdiv_(params, m, denom, -lr / bias_correction1);
    begin = end;
  }
}

void AdamW::update_fused(Batch& b, const GroupOptions& group) const {
  // The kernel reads the step count of every tensor from a float tensor on its device.
  std::vector<torch::Tensor> steps;
  steps.reserve(b.steps.size());
  for (size_t i = 0; i < b.steps.size(); ++i)
    steps.push_back(torch::full({}, static_cast<double>(b.steps[i]),
                                torch::TensorOptions().dtype(torch::kFloat).device(b.params[i].device())));
  at::_fused_adamw_(b.params, b.grads, b.moments[0], b.moments[1], /*max_exp_avg_sqs=*/{}, steps, group.lr,
                    cfg().beta1, cfg().beta2, group.weight_decay, cfg().eps, /*amsgrad=*/false, /*maximize=*/false);
}

}  // namespace ht::train
