#include "train/adamw.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"

namespace ht::train {

AdamW::AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
             config::OptimizerImpl impl)
    : torch::optim::AdamW(std::move(groups), std::move(defaults)),
      impl_(impl == config::OptimizerImpl::kAuto ? config::OptimizerImpl::kFused : impl) {
  for (auto& group : param_groups())
    HT_REQUIRE(!static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad() ||
                   impl_ == config::OptimizerImpl::kPlain,
               ExitCode::kUsage, "train.optimizer_impl: amsgrad needs the plain kernel");
}

AdamW::GroupLists AdamW::prepare(torch::optim::OptimizerParamGroup& group) {
  GroupLists l;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto& slot = state()[p.unsafeGetTensorImpl()];
    if (!slot) {
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->step(0);
      st->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
      st->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
      slot = std::move(st);
    }
    auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
    st.step(st.step() + 1);
    l.params.push_back(p);
    l.grads.push_back(p.grad());
    l.exp_avgs.push_back(st.exp_avg());
    l.exp_avg_sqs.push_back(st.exp_avg_sq());
    l.steps.push_back(st.step());
  }
  return l;
}

void AdamW::step_fused(torch::optim::OptimizerParamGroup& group) {
  const auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
  GroupLists l = prepare(group);
  if (l.params.empty()) return;
  // The kernel reads the step count of every tensor from a float tensor on its device.
  std::vector<torch::Tensor> steps;
  steps.reserve(l.steps.size());
  for (size_t i = 0; i < l.steps.size(); ++i)
    steps.push_back(torch::full({}, static_cast<double>(l.steps[i]),
                                torch::TensorOptions().dtype(torch::kFloat).device(l.params[i].device())));
  at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(),
                    std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(), /*amsgrad=*/false,
                    /*maximize=*/false);
}

// torch::optim::AdamW::step's arithmetic, op for op, over lists of tensors with the same step.
void AdamW::step_foreach(torch::optim::OptimizerParamGroup& group) {
  const auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
  GroupLists l = prepare(group);
  if (l.params.empty()) return;
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  for (size_t begin = 0; begin < l.params.size();) {
    size_t end = begin;
    while (end < l.params.size() && l.steps[end] == l.steps[begin]) ++end;
    auto part = [&](std::vector<torch::Tensor>& v) {
      return std::vector<torch::Tensor>(v.begin() + static_cast<long>(begin), v.begin() + static_cast<long>(end));
    };
    auto params = part(l.params), grads = part(l.grads), m = part(l.exp_avgs), v = part(l.exp_avg_sqs);
    const auto step = static_cast<double>(l.steps[begin]);
    const double bias_correction1 = 1 - std::pow(beta1, step), bias_correction2 = 1 - std::pow(beta2, step);
    if (o.weight_decay() != 0) at::_foreach_mul_(params, 1 - o.lr() * o.weight_decay());
    at::_foreach_mul_(m, beta1);
    at::_foreach_add_(m, grads, 1 - beta1);
    at::_foreach_mul_(v, beta2);
    at::_foreach_addcmul_(v, grads, grads, 1 - beta2);
    auto denom = at::_foreach_sqrt(v);
    at::_foreach_div_(denom, std::sqrt(bias_correction2));
    at::_foreach_add_(denom, o.eps());
    at::_foreach_addcdiv_(params, m, denom, -o.lr() / bias_correction1);
    begin = end;
  }
}

torch::Tensor AdamW::step(LossClosure closure) {
  if (impl_ == config::OptimizerImpl::kPlain) return torch::optim::AdamW::step(std::move(closure));
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    if (impl_ == config::OptimizerImpl::kFused) step_fused(group);
    else step_foreach(group);
  }
  return loss;
}

}  // namespace ht::train
