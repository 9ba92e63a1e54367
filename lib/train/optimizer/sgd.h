// SGD with momentum (train.optimizer = sgd), torch::optim::SGD's arithmetic without dampening or
// Nesterov: d = g + weight_decay x p (coupled L2), buf = momentum x buf + d, p -= lr x buf.
// Moment: momentum_buffer (zeros before the first step, which gives buf = d as torch does).
#pragma once
#include "train/optimizer/optimizer.h"

namespace ht::train {

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<OptimizerParam> params, const config::TrainConfig& cfg);
  config::OptimizerKind kind() const override { return config::OptimizerKind::kSgd; }
  const std::vector<std::string>& moment_names() const override;

 private:
  void update(Batch& batch, const GroupOptions& group) override;
};

}  // namespace ht::train
