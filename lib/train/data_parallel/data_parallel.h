// How replicas stay in step: one interface, one implementation per way of doing it, chosen once
// from the config by make_data_parallel():
//   SyncAllReduce   gradients averaged every step, blocking or overlapped with backward (sync.h)
//   Zero1           the same with the optimizer state sharded: reduce-scatter, 1/W update, all-gather (zero1.h)
//   LocalSgd        N local steps, then parameters averaged (plain or DiLoCo), optionally in streamed
//                   fragments, quantized, overlapped, and hierarchical: an inner per-step strategy in
//                   each group of ranks, local SGD across groups (local_sgd.h)
// A strategy owns the optimizer (ZeRO-1 builds it over its shard), so the caller only drives the
// step: zero_grad, before/after backward, clip_and_update, after_update. The Trainer and
// hand-written loops never ask which strategy they have.
// Must not: read files or the config beyond its own keys; call MPI (comm/ does).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "train/optimizer/optimizer.h"

namespace ht::train {

struct SyncStats {
  int64_t syncs = 0;                 // parameter exchanges (an overlapped one counts when started; a fragment counts 1/F)
  int64_t fragment_syncs = 0;        // fragment exchanges (= syncs x fragments when streaming)
  int64_t grad_allreduces = 0;       // per-step gradient averages (sync mode, warmup, inside a group)
  uint64_t bytes_sent = 0;           // payload bytes this rank handed to MPI for averaging (cumulative)
  uint64_t inner_bytes_sent = 0;     // of bytes_sent: inside a group of the hierarchical mode
  double last_drift = 0.0;           // sqrt(sum over ranks |p_r - mean|^2 / W) at the last sync (before averaging)
  double comm_seconds = 0.0;         // wall time inside exchanges (pack, collectives, unpack, telemetry), cumulative
  int64_t steps = 0;                 // optimizer steps seen by after_update()
  uint64_t bytes_last_sync = 0;      // payload of the last parameter exchange (params, buffers, moments)
  uint64_t peak_bytes_per_exchange = 0;  // the largest single parameter exchange (one fragment when streaming)
  uint64_t bytes_per_grad_allreduce = 0;
  double last_sync_seconds = 0.0;
  uint64_t last_checksum = 0;        // parameter checksum after the last sync (equal on all ranks)
  double last_quant_error = 0.0;     // int8/int4: RMS of (decoded - exact) mean at the last checked sync
  int64_t buckets_in_backward = 0;   // overlapped gradient buckets started inside backward (cumulative)
  int64_t staged_transfers = 0;      // exchanges that went through the host staging buffer (cumulative)
};

// What a strategy saves beside the model and the optimizer (keys below "local_sgd/" in a checkpoint).
struct StrategyState {
  std::map<std::string, torch::Tensor> shared;    // identical on every rank
  std::map<std::string, int64_t> ints;
  std::map<std::string, torch::Tensor> per_rank;  // this rank's own
};

class DataParallel {
 public:
  virtual ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // One start-up line: the mode, what is exchanged when, in which dtype.
  virtual std::string describe() const = 0;
  virtual Optimizer& optimizer() = 0;
  virtual const SyncStats& stats() const = 0;

  // --- one optimizer step, in this order ---
  // Zeroes the gradients before a step's accumulation (in place while they live in an exchange
  // buffer, so the next backward accumulates into it; freed otherwise).
  virtual void zero_grad();
  // Before each micro-batch's backward; last: the micro-batch that completes the step.
  virtual void before_backward(bool last_micro_batch) {}
  // After backward, before the optimizer: gradient exchange when this mode makes one every step.
  virtual void after_backward() = 0;
  // Clips to the global gradient norm (max_norm <= 0: no clipping) and updates the parameters;
  // returns the norm before clipping (the same on every rank while gradients are averaged).
  virtual double clip_and_update(double max_norm);
  // After the update: parameter exchanges that are due (local SGD), the all-gather (ZeRO-1).
  virtual void after_update() = 0;
  // Brings the replicas together at the end of training (idempotent until the next step).
  virtual void finish() {}

  // --- passive views, for evaluation and checkpoints: collective, the training is unchanged ---
  // True while the replicas may differ (local steps since the last exchange, or one in flight).
  virtual bool replicas_differ() const { return false; }
  // True when the parameters live in a flat buffer this strategy's optimizer updates through views
  // (ZeRO-1): a strategy around it must copy into them, never rebind their storage.
  virtual bool owns_parameter_storage() const { return false; }
  // The tensors an exchange covers: the parameters, then the float buffers it averages.
  const std::vector<torch::Tensor>& sync_tensors() const { return sync_set_; }
  // Copies of sync_tensors() holding the model an exchange at this moment would give, bitwise what
  // finish() would produce. Plain copies while the replicas agree.
  virtual std::vector<torch::Tensor> averaged_copies();
  // Runs fn with averaged_copies() in the replica's tensors, then puts the replica's own values back.
  void with_averaged_model(const std::function<void()>& fn);

  // --- checkpoint state ---
  // Optimizer moments differ per rank (local SGD's replicas) or agree on every rank.
  virtual bool moments_per_rank() const { return false; }
  // The optimizer state of the whole model by "<moment>/<param>" and "step/<param>" (collective:
  // ZeRO-1 gathers its shards); restore takes the same map, whichever way it was written.
  virtual std::map<std::string, torch::Tensor> optimizer_state();
  virtual void load_optimizer_state(const std::map<std::string, torch::Tensor>& state);
  virtual StrategyState state() { return {}; }
  // same_world: the rank count of the run that saved. Otherwise the run continues from the
  // averaged model as after an exchange.
  virtual void load_state(const StrategyState& state, bool same_world) {}

 protected:
  DataParallel(torch::nn::Module& model, comm::Communicator& comm, std::vector<torch::Tensor> sync_set)
      : model_(model), comm_(comm), sync_set_(std::move(sync_set)) {}
  torch::nn::Module& model_;
  comm::Communicator& comm_;
  std::vector<torch::Tensor> sync_set_;
};

// The tensors a parameter exchange covers: the parameters, then (with_buffers) the float buffers.
std::vector<torch::Tensor> sync_tensors_of(torch::nn::Module& model, bool with_buffers);

// The strategy the config asks for (local_sgd.*, train.shard_optimizer, train.optimizer), over this
// model on these ranks. Collective: broadcasts rank 0's parameters (identical start) and checks
// that every rank has the same model shape and settings. local_sgd.steps must be a count by then
// (train::resolve_local_steps() resolves auto).
std::unique_ptr<DataParallel> make_data_parallel(torch::nn::Module& model, comm::Communicator& comm,
                                                 const config::Config& cfg);

// The constraints between the data-parallel keys and the world (local_sgd.group_size against the
// rank and node counts). Throws ht::Error(kUsage) naming the key; every rank decides alike, so
// app/ can agree on it before any rank trains.
void check_world(const config::Config& cfg, int world_size, int node_size);

}  // namespace ht::train
