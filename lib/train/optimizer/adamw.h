// AdamW (decoupled weight decay) with a choice of kernel (train.optimizer_impl): plain (per-tensor
// ops in torch::optim::AdamW's order, bitwise equal to it), foreach (the same ops over tensor
// lists, bitwise equal to plain), fused (at::_fused_adamw_: one kernel over every tensor of a
// group, within a few ulp of plain). Moments: exp_avg, exp_avg_sq.
#pragma once
#include "train/optimizer/optimizer.h"

namespace ht::train {

class AdamW final : public Optimizer {
 public:
  // train.optimizer_impl auto means fused (measured fastest here: docs/benchmarks.md).
  AdamW(std::vector<OptimizerParam> params, const config::TrainConfig& cfg);
  config::OptimizerKind kind() const override { return config::OptimizerKind::kAdamw; }
  const std::vector<std::string>& moment_names() const override;
  config::OptimizerImpl impl() const { return impl_; }

 private:
  void update(Batch& batch, const GroupOptions& group) override;
  void update_plain(Batch& batch, const GroupOptions& group) const;
  void update_foreach(Batch& batch, const GroupOptions& group) const;
  void update_fused(Batch& batch, const GroupOptions& group) const;

  config::OptimizerImpl impl_;
};

}  // namespace ht::train
