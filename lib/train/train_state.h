// Converts the full training state (model, optimizer moments, counters, RNG, loader position, the
// data-parallel strategy's state, resolved config) to and from a checkpoint::Snapshot. The one
// place that knows which state is shared by all ranks and which is per rank.
#pragma once
#include <torch/torch.h>

#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "train/data_parallel/data_parallel.h"

namespace ht::train {

struct Counters {
  int64_t step = 0;         // optimizer steps taken
  int64_t tokens_seen = 0;  // global tokens consumed
  int64_t global_batch = 0; // samples per optimizer step over all ranks
  // Seconds of training steps along this run's history, resumes included (evaluations, checkpoints
  // and start-up excluded): the time axis of metrics.jsonl (`train_seconds`). Rank 0's clock.
  double train_seconds = 0.0;
};

struct StateRefs {
  model::Gpt& gpt;
  DataParallel& dp;  // the strategy: its optimizer, its state, whether the replicas differ
  data::Loader& loader;
};

// What a checkpoint says about the run beyond its state.
struct RunInfo {
  std::string config_toml;       // the resolved config
  std::string dataset_identity;  // data::Dataset::identity(): a resume recognises other data under the same path
  std::string run_id;            // this run's lineage (checkpoint::Snapshot::run_id)
};

checkpoint::Snapshot capture_state(const StateRefs& refs, const Counters& counters, const RunInfo& run,
                                   comm::Communicator& comm);

// Throws ht::Error(kUsage) if the snapshot does not fit the model or its optimizer
// (checkpoint::check_compatible: another optimizer's moments are refused, naming train.optimizer)
// or the global batch differs.
// world_size: this run's rank count; the same as the checkpoint's restores every rank's replica
// and an average in flight exactly, another continues from the averaged model (docs/checkpoint-format.md).
// A checkpoint trained on other data (its dataset identity differs) is refused unless
// allow_dataset_change (checkpoint.allow_dataset_change).
void restore_state(const StateRefs& refs, Counters& counters, const checkpoint::Snapshot& snap, int world_size,
                   const std::string& dataset_identity, bool allow_dataset_change);

// The counters of a training state bound each other: the root attribute step (attributes carry no
// checksum) equals /state/step, the counts are non-negative (the global batch at least 1), and each
// optimizer step count (shared or this rank's) lies in [0, step]: the optimizer steps at most once
// per training step. A damaged value that the checksums miss (Fletcher32 cannot tell a 16-bit word
// 0x0000 from 0xFFFF) is refused: ht::Error(kData) naming the file and the counter. restore_state
// and `inspect` call it.
void check_counters(const checkpoint::Snapshot& snap);

// The resolved config a checkpoint stores (string "config"), parsed; nullopt when it holds none.
std::optional<config::Config> stored_config(const checkpoint::Snapshot& snap);

// The CPU generator's state as a uint8 tensor (CUDA devices' generators are captured the same way).
torch::Tensor cpu_rng_state();
void set_cpu_rng_state(const torch::Tensor& state);

}  // namespace ht::train
