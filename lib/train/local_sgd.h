// Local SGD scope (the C++ twin of Accelerate's `with LocalSGD(...)`): ranks take N optimizer
// steps independently, then average parameters with one fused all-reduce (lib/comm).
// CONTRACT header written before the implementation; the local-SGD work owns and may extend it.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>

#include "comm/communicator.h"
#include "config/config.h"

namespace ht::train {

struct SyncStats {
  int64_t syncs = 0;                 // parameter averages done
  int64_t grad_allreduces = 0;       // synchronous gradient averages (enabled=false or warmup)
  uint64_t bytes_sent = 0;           // payload bytes this rank handed to MPI for averaging
  double last_drift = 0.0;           // sqrt(sum over ranks |p_r - mean|^2) / W at the last sync (before averaging)
  double comm_seconds = 0.0;
};

class LocalSgd {
 public:
  // Broadcasts rank 0's parameters (identical start) and checks that all ranks agree on the
  // parameter shapes (hash all-reduce; a mismatch names the rank that differs).
  LocalSgd(torch::nn::Module& model, torch::optim::Optimizer& optimizer, comm::Communicator& comm,
           const config::LocalSgdConfig& cfg);
  // Final synchronisation unless finish() already ran (never throws from the destructor: logs).
  ~LocalSgd();

  // After backward, before the optimizer step: averages gradients when synchronous
  // (enabled=false, or during local_sgd.warmup_steps); no-op otherwise.
  void after_backward();
  // After each optimizer step: counts it, averages parameters every N local steps.
  void step();
  // Final average (idempotent until the next step()); called before every checkpoint.
  void finish();

  const SyncStats& stats() const;
  int64_t local_step() const;

  // Checkpointed state (DiLoCo outer copy and momentum, counters).
  std::map<std::string, torch::Tensor> state_tensors() const;
  std::map<std::string, int64_t> state_ints() const;
  void load_state(const std::map<std::string, torch::Tensor>& tensors, const std::map<std::string, int64_t>& ints);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ht::train
