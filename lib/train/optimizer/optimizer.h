// The optimizer seam: what every optimizer (train.optimizer: AdamW, SGD with momentum) is to the
// rest of hpctrain. An Optimizer updates a list of named tensors (whole parameters, or this rank's
// slices of them under ZeRO-1) in two groups, decayed and not, and describes the state it keeps
// per tensor as a fixed list of named moments of the tensor's shape plus a step count.
// Checkpoints ("optimizer/<moment>/<name>"), local SGD's moment averaging, ZeRO-1's sharding and
// `inspect` work from that description alone; none of them names an optimizer kind.
// Must not: talk to other ranks (train/data_parallel does), read files, know the model beyond names.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"

namespace ht::train {

// One tensor the optimizer updates; decay: weight decay applies (the matmul weights).
struct OptimizerParam {
  std::string name;
  torch::Tensor tensor;
  bool decay = false;
};

// The state of one tensor: its moments in Optimizer::moment_names() order, and its step count.
struct MomentState final : torch::optim::OptimizerCloneableParamState<MomentState> {
  std::vector<torch::Tensor> moments;
  int64_t step = 0;
};

// Options of one parameter group: the learning rate (set by the schedule) and the weight decay.
struct GroupOptions final : torch::optim::OptimizerCloneableOptions<GroupOptions> {
  double lr = 0.0;
  double weight_decay = 0.0;
  double get_lr() const override { return lr; }
  void set_lr(const double v) override { lr = v; }
};

class Optimizer : public torch::optim::Optimizer {
 public:
  // Group 0: the tensors with decay (train.weight_decay), group 1: the others (no decay).
  Optimizer(std::vector<OptimizerParam> params, const config::TrainConfig& cfg);

  virtual config::OptimizerKind kind() const = 0;
  // The per-tensor moments this optimizer keeps, in order, e.g. {"exp_avg", "exp_avg_sq"}.
  virtual const std::vector<std::string>& moment_names() const = 0;

  // One update of every tensor that has a gradient.
  torch::Tensor step(LossClosure closure = nullptr) final;

  const std::vector<OptimizerParam>& params() const { return params_; }
  // nullptr before the tensor's first step.
  const MomentState* state_of(const torch::Tensor& t) const;
  // Installs a tensor's state (resume): moments in moment_names() order, each of t's shape.
  void set_state(const torch::Tensor& t, std::vector<torch::Tensor> moments, int64_t step);
  // Every moment tensor that exists, tensor by tensor in params() order (moment averaging).
  std::vector<torch::Tensor> all_moments() const;
  // Bytes of moment state this rank holds.
  int64_t state_bytes() const;

 protected:
  // The tensors of one group that have a gradient, with their state (created as zeros) and step
  // counts already advanced by one.
  struct Batch {
    std::vector<torch::Tensor> params, grads;
    std::vector<std::vector<torch::Tensor>> moments;  // [moment][tensor]
    std::vector<int64_t> steps;
  };
  virtual void update(Batch& batch, const GroupOptions& group) = 0;
  const config::TrainConfig& cfg() const { return cfg_; }

 private:
  Batch prepare(torch::optim::OptimizerParamGroup& group);

  std::vector<OptimizerParam> params_;
  config::TrainConfig cfg_;
};

// The optimizer train.optimizer names, over these tensors.
std::unique_ptr<Optimizer> make_optimizer(const config::TrainConfig& cfg, std::vector<OptimizerParam> params);
// The model's parameters by name, decay on the 2-D weights of Linear layers (GPT-2's grouping: not
// on embeddings, norms or biases).
std::vector<OptimizerParam> optimizer_params(torch::nn::Module& model);

}  // namespace ht::train
