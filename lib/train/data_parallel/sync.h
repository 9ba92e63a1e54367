// Synchronous data parallel: the gradients of every step averaged across ranks before the
// optimizer, as PyTorch DDP does. Blocking (one fused exchange after backward, the gradients kept
// in its flat buffer so that backward accumulates straight into it) or, with
// local_sgd.overlap_grad_allreduce, in buckets started during backward (grad_overlap.h). Also the
// inner strategy of local SGD: during its warmup steps, and every step inside a group of the
// hierarchical mode (on the group's communicator).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/param_averager.h"
#include "train/data_parallel/data_parallel.h"
#include "train/data_parallel/grad_overlap.h"

namespace ht::train {

class SyncAllReduce final : public DataParallel {
 public:
  // optimizer: shared with local SGD, whose warmup and groups may use two per-step strategies.
  SyncAllReduce(torch::nn::Module& model, comm::Communicator& comm, const config::Config& cfg,
                std::shared_ptr<Optimizer> optimizer);
  std::string describe() const override;
  Optimizer& optimizer() override { return *optimizer_; }
  const SyncStats& stats() const override { return stats_; }
  void before_backward(bool last_micro_batch) override;
  void after_backward() override;
  void after_update() override { stats_.steps += 1; }

 private:
  std::vector<torch::Tensor> gradients();
  void average_blocking();
  void average_overlapped();
  void setup_overlap();
  comm::AveragerOptions exchange_options() const;

  config::LocalSgdConfig cfg_;
  std::shared_ptr<Optimizer> optimizer_;
  std::vector<torch::Tensor> trainable_;          // parameters with requires_grad
  std::unique_ptr<comm::ParamAverager> grad_avg_;  // made at the first exchange (or by setup_overlap)
  std::unique_ptr<GradOverlap> overlap_;
  SyncStats stats_;
};

// The exchange dtype local_sgd.comm_dtype names.
comm::ExchangeDType exchange_dtype(config::ExchangeDtype t);
// What the per-step gradient exchange sends for comm_dtype t: gradients are never quantized (int8 /
// int4 apply to local SGD's parameter deltas), so those go in fp32.
comm::ExchangeDType gradient_exchange_dtype(config::ExchangeDtype t);

}  // namespace ht::train
