// SGD with momentum over tensor lists (see sgd.h).
#include "train/optimizer/sgd.h"

#include <ATen/ATen.h>

namespace ht::train {

Sgd::Sgd(std::vector<OptimizerParam> params, const config::TrainConfig& cfg) : Optimizer(std::move(params), cfg) {}

const std::vector<std::string>& Sgd::moment_names() const {
  static const std::vector<std::string> names = {"momentum_buffer"};
  return names;
}

void Sgd::update(Batch& b, const GroupOptions& group) {
  auto& buf = b.moments[0];
  std::vector<torch::Tensor> d = group.weight_decay != 0 ? at::_foreach_add(b.grads, b.params, group.weight_decay)
                                                         : b.grads;
  at::_foreach_mul_(buf, cfg().momentum);
  at::_foreach_add_(buf, d);
  at::_foreach_add_(b.params, buf, -group.lr);
}

}  // namespace ht::train
