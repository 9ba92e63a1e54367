// Local SGD scope (the C++ twin of Accelerate's `with LocalSGD(...)`): ranks take N optimizer
// steps independently, then average parameters with one fused all-reduce (lib/comm).
// Semantics (warmup, overlap, DiLoCo, drift, consistency check): docs/local-sgd.md.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"

namespace ht::train {

struct SyncStats {
  int64_t syncs = 0;                 // parameter averages done (an overlapped one counts when started)
  int64_t grad_allreduces = 0;       // synchronous gradient averages (enabled=false or warmup)
  uint64_t bytes_sent = 0;           // payload bytes this rank handed to MPI for averaging (cumulative)
  double last_drift = 0.0;           // sqrt(sum over ranks |p_r - mean|^2 / W) at the last sync (before averaging)
  double comm_seconds = 0.0;         // wall time inside averaging (pack, collectives, unpack, telemetry), cumulative
  int64_t steps = 0;                 // optimizer steps seen by step()
  uint64_t bytes_last_sync = 0;      // payload of the last parameter average (params, buffers, moments)
  uint64_t bytes_per_grad_allreduce = 0;
  double last_sync_seconds = 0.0;
  uint64_t last_checksum = 0;        // parameter checksum after the last sync (equal on all ranks)
};

class LocalSgd {
 public:
  // Broadcasts rank 0's parameters (identical start) and checks that all ranks agree on the
  // parameter shapes (hash all-reduce; a mismatch names the rank that differs).
  LocalSgd(torch::nn::Module& model, torch::optim::Optimizer& optimizer, comm::Communicator& comm,
           const config::LocalSgdConfig& cfg);
  // Final synchronisation unless finish() already ran (never throws from the destructor: logs).
  ~LocalSgd();

  // Before each micro-batch's backward; last_micro_batch: the one that completes the optimizer
  // step. On it, while gradients are averaged every step and local_sgd.overlap_grad_allreduce is
  // set, the gradient buckets start during that backward (train/grad_overlap.h). Optional: without
  // it after_backward() starts them all, with the same result.
  void before_backward(bool last_micro_batch);
  // After backward, before the optimizer step: averages gradients when synchronous
  // (enabled=false, or during local_sgd.warmup_steps); no-op otherwise.
  void after_backward();
  // True while gradients are averaged every step and live in the averager's flat buffer: the
  // caller should zero them in place (Optimizer::zero_grad(false)) rather than free them, so
  // backward accumulates straight into the buffer and the next average skips pack and unpack.
  bool keep_gradients() const;
  // After each optimizer step: counts it, averages parameters every N local steps.
  void step();
  // Final average (idempotent until the next step()); called before every checkpoint.
  void finish();

  const SyncStats& stats() const;
  // Local optimizer steps since the last parameter average (0 right after a sync).
  int64_t local_step() const;

  // Collective diagnostic (all ranks call it): the drift sqrt(sum_r |p_r - mean|^2 / W) of the
  // current parameters, measured with one extra average. Changes nothing; not counted in stats().
  double measure_drift();
  // Test hook: runs after each average is applied and before the consistency check.
  void set_post_average_hook(std::function<void()> hook);

  // True while the replicas may differ: local steps since the last average, or one in flight.
  bool replicas_differ() const;
  // The tensors an average covers: the parameters, then the float buffers (average_buffers).
  const std::vector<torch::Tensor>& sync_tensors() const;
  // Collective and passive: copies of sync_tensors() holding the model an average at this moment
  // would give, bitwise what finish() would produce, while the replicas, the optimizer, the
  // counters and the telemetry stay as they are. Saves and evaluations use it, so that neither
  // changes the training they record or measure. Plain copies when the replicas agree.
  std::vector<torch::Tensor> averaged_copies();
  // Collective and passive: runs `fn` with the averaged model (averaged_copies()) in the replica's
  // tensors, then puts the replica's own values back bit for bit. Evaluation uses it.
  void with_averaged_model(const std::function<void()>& fn);

  // Checkpointed state. Shared: DiLoCo outer copy and momentum, counters. Per rank: the state of
  // an overlapped average in flight (its snapshot and its delivered mean; waiting for the transfer
  // to end changes no value).
  std::map<std::string, torch::Tensor> state_tensors() const;
  std::map<std::string, int64_t> state_ints() const;
  std::map<std::string, torch::Tensor> rank_state_tensors();
  // exact: the same rank count as the run that saved (every rank restores its own replica and the
  // average in flight). Otherwise the run continues as after an average at the saved step: from
  // the averaged model, DiLoCo's outer copy set to it, its momentum as saved.
  void load_state(const std::map<std::string, torch::Tensor>& tensors, const std::map<std::string, int64_t>& ints,
                  const std::map<std::string, torch::Tensor>& rank_tensors, bool exact);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ht::train
