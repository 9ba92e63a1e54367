// AdamW with a choice of kernel (train.optimizer_impl): plain (torch::optim::AdamW's per-tensor
// ops), foreach (the same ops over tensor lists, bitwise equal to plain), fused (at::_fused_adamw_:
// one kernel over every tensor of a parameter group, within a few ulp of plain). The state stays
// torch::optim::AdamWParamState, so checkpoints, local SGD's moment averaging and `inspect` see no
// difference between kernels.
#pragma once
#include <torch/optim/adamw.h>

#include <vector>

#include "config/config.h"

namespace ht::train {

class AdamW : public torch::optim::AdamW {
 public:
  // impl auto means fused (measured fastest here: docs/benchmarks.md).
  AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
        config::OptimizerImpl impl);
  torch::Tensor step(LossClosure closure = nullptr) override;
  config::OptimizerImpl impl() const { return impl_; }

 private:
  // The group's parameters with a gradient, their state (created as torch::optim::AdamW creates
  // it) with the step count advanced by one.
  struct GroupLists {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<int64_t> steps;
  };
  GroupLists prepare(torch::optim::OptimizerParamGroup& group);
  void step_fused(torch::optim::OptimizerParamGroup& group);
  void step_foreach(torch::optim::OptimizerParamGroup& group);

  config::OptimizerImpl impl_;
};

}  // namespace ht::train
