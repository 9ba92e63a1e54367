// Local SGD (the C++ twin of Accelerate's `with LocalSGD(...)`): ranks take N optimizer steps on
// their own, then their parameters are averaged (plain, or DiLoCo's outer Nesterov step). On top:
//   streaming  local_sgd.fragments = F: the flat parameter layout in F equal ranges; fragment f is
//              exchanged at step (f + 1) N / F of each N-step cycle, so the link carries one
//              fragment at a time and every value is exchanged once per cycle;
//   overlap    local_sgd.overlap_steps = k: an exchange runs under the next k steps and is merged
//              when it lands (target - snapshot added, the local progress kept);
//   quantized  local_sgd.comm_dtype = int8 | int4: the change since the last exchange goes on the
//              wire with one scale per local_sgd.quant_block values (fragment_exchange.h);
//   hierarchy  local_sgd.group_size = G: each group of G consecutive ranks (or of one node)
//              averages gradients every step (SyncAllReduce on the group, or Zero1 with
//              train.shard_optimizer: the group's optimizer state sharded over its ranks) and is
//              one replica of local SGD across groups; rank i of a group exchanges slice i of each
//              fragment with rank i of every other group, then the group all-gathers the slices.
// Warmup (local_sgd.warmup_steps): gradients averaged over every rank each step first (with Zero1
// in the groups: the group's reduced shard averaged again across the groups).
// Semantics and telemetry: docs/local-sgd.md.
#pragma once
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/param_averager.h"
#include "train/data_parallel/data_parallel.h"
#include "train/data_parallel/fragment_exchange.h"

namespace ht::train {

class LocalSgd final : public DataParallel {
 public:
  // How warmup steps (local_sgd.warmup_steps) average gradients over the whole world.
  struct Warmup {
    // Every rank's per-step strategy, when the groups are not the whole world (else null).
    std::unique_ptr<DataParallel> world;
    // Zero1 in the groups has no world-wide twin: the group's reduced gradient shard is averaged
    // again across the groups (rank i of every group holds the same shard), the world's mean.
    bool shards_across_groups = false;
  };
  // inner: the per-step strategy of a group (hierarchy), or of every rank during warmup; its
  // optimizer is the one local SGD steps with.
  LocalSgd(torch::nn::Module& model, comm::Communicator& comm, const config::Config& cfg,
           std::unique_ptr<comm::Communicator> group, std::unique_ptr<comm::Communicator> cross,
           std::unique_ptr<DataParallel> inner, Warmup warmup);
  // Final exchange unless finish() already ran (never throws from the destructor: logs).
  ~LocalSgd() override;

  std::string describe() const override;
  Optimizer& optimizer() override { return inner_->optimizer(); }
  const SyncStats& stats() const override;
  void before_backward(bool last_micro_batch) override;
  void after_backward() override;
  double clip_and_update(double max_norm) override;
  void after_update() override;
  void finish() override;

  bool replicas_differ() const override;
  std::vector<torch::Tensor> averaged_copies() override;
  bool moments_per_rank() const override { return true; }
  std::map<std::string, torch::Tensor> optimizer_state() override { return inner_->optimizer_state(); }
  void load_optimizer_state(const std::map<std::string, torch::Tensor>& state) override {
    inner_->load_optimizer_state(state);
  }
  StrategyState state() override;
  void load_state(const StrategyState& state, bool same_world) override;

  // Local optimizer steps since the current cycle began (0 right after a full exchange).
  int64_t local_step() const { return cycle_; }
  // Fragment f's range [begin, end) of the flat layout of sync_tensors() (padded at the end), and
  // the step of the cycle at which it is exchanged.
  size_t num_fragments() const { return fragments_.size(); }
  std::pair<int64_t, int64_t> fragment_range(size_t f) const {
    return {fragments_.at(f).exchange->begin_offset(), fragments_.at(f).exchange->end_offset()};
  }
  int64_t fragment_step(size_t f) const { return fragments_.at(f).start; }
  // Times a gradient hook drove an exchange in flight during backward (overlap_steps >= 1;
  // telemetry: proves the background path ran).
  int64_t backward_progress_calls() const { return backward_progress_calls_; }
  // Collective diagnostic: sqrt(sum over replicas |p - mean|^2 / replicas) of the current
  // parameters, with one extra average. Changes nothing; not counted in stats().
  double measure_drift();

 private:
  struct Fragment {
    std::unique_ptr<FragmentExchange> exchange;
    int64_t start = 0;        // the step of the cycle (1..N) at which it begins
    int64_t steps_since = 0;  // local steps since its last exchange began
    int64_t age = 0;          // steps since its exchange in flight began
  };
  bool in_warmup() const { return stats_.steps < cfg_.warmup_steps; }
  DataParallel& per_step() { return in_warmup() && warmup_ ? *warmup_ : *inner_; }
  bool per_step_active() const { return hierarchical() || in_warmup(); }
  bool hierarchical() const { return group_->size() > 1; }
  void begin(Fragment& f, bool blocking);
  void progress_from_backward();
  void complete(Fragment& f);
  void after_exchange(const Fragment& f, double seconds);
  void record_round();
  torch::Tensor local_values() const;
  void average_moments();
  void average_gradients_across_groups();
  std::string key(size_t f, const std::string& name) const;

  config::LocalSgdConfig cfg_;
  std::unique_ptr<comm::Communicator> group_, cross_owned_, layout_comm_;
  comm::Communicator* cross_;  // cross_owned_, or the world when there is one rank per group
  std::unique_ptr<DataParallel> inner_, warmup_;
  bool warmup_shards_across_groups_;  // Warmup::shards_across_groups
  std::unique_ptr<comm::ParamAverager> layout_;  // the flat layout of sync_tensors()
  std::unique_ptr<comm::ParamAverager> moment_avg_;
  std::unique_ptr<comm::ParamAverager> warmup_cross_avg_;  // warmup with Zero1 in the groups
  std::vector<Fragment> fragments_;
  bool outer_ = false;   // the exchanges keep an outer copy (DiLoCo, or a quantized plain average)
  int64_t cycle_ = 0;    // local steps since the cycle began
  bool finished_ = true; // nothing to do in finish() until the next local step
  uint64_t round_bytes_ = 0;
  SyncStats stats_;
  mutable SyncStats merged_;
  std::vector<std::pair<torch::Tensor, unsigned>> progress_hooks_;  // (parameter, hook) to remove
  std::thread::id owner_;  // the thread that owns MPI
  int64_t backward_progress_calls_ = 0;
};

// Local SGD as the config asks: the groups, the inner strategies, the fragments.
std::unique_ptr<DataParallel> make_local_sgd(torch::nn::Module& model, comm::Communicator& comm,
                                             const config::Config& cfg);

}  // namespace ht::train
