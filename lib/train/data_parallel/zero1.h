// ZeRO-1 (train.shard_optimizer = true): per-step data parallel with the optimizer state sharded.
// The parameters and the gradients live in flat fp32 buffers of W equal shards (padded); rank r
// owns shard r. One step: the gradients are reduce-scattered (rank r receives the sum of shard r,
// scaled by 1/W), the global gradient norm is formed from the shards' squares (one 8-byte
// all-reduce), the optimizer updates shard r of the parameters with shard r of its state, and the
// parameters are all-gathered in place. The wire carries what an all-reduce carries (a ring
// all-reduce is a reduce-scatter plus an all-gather); each rank holds 1/W of the optimizer state.
// Checkpoints hold the whole state as the unsharded modes write it (the shards are gathered at a
// save), so a resume on any rank count, sharded or not, re-shards by slicing. Also the per-step
// strategy inside each group of hierarchical local SGD (on the group's communicator), where the
// group is one replica and its ranks share that replica's optimizer state.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/param_averager.h"
#include "train/data_parallel/data_parallel.h"

namespace ht::train {

class Zero1 final : public DataParallel {
 public:
  Zero1(torch::nn::Module& model, comm::Communicator& comm, const config::Config& cfg);
  std::string describe() const override;
  Optimizer& optimizer() override { return *optimizer_; }
  const SyncStats& stats() const override { return stats_; }
  void after_backward() override;
  double clip_and_update(double max_norm) override;
  void after_update() override;
  bool owns_parameter_storage() const override { return true; }
  std::map<std::string, torch::Tensor> optimizer_state() override;
  void load_optimizer_state(const std::map<std::string, torch::Tensor>& state) override;

 private:
  // The part of parameter `param` that falls into this rank's shard.
  struct Piece {
    size_t param = 0;
    int64_t offset_in_param = 0, offset_in_shard = 0, numel = 0;
  };
  std::vector<OptimizerParam> make_pieces();

  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<int64_t> offsets_;  // each parameter's offset in the flat layout
  std::unique_ptr<comm::ParamAverager> param_flat_, grad_flat_;
  int64_t shard_numel_ = 0, shard_begin_ = 0;
  torch::Tensor grad_shard_;  // this rank's reduced gradients (the front of grad_flat_, in place): the
                              // optimizer's gradients are views of it
  std::vector<Piece> pieces_;
  std::unique_ptr<Optimizer> optimizer_;
  SyncStats stats_;
};

}  // namespace ht::train
