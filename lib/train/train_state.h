// Converts the full training state (model, AdamW moments, counters, RNG, loader position, local
// SGD state, resolved config) to and from a checkpoint::Snapshot. The one place that knows which
// state is shared by all ranks and which is per rank.
#pragma once
#include <torch/torch.h>

#include <string>

#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "train/local_sgd.h"

namespace ht::train {

struct Counters {
  int64_t step = 0;         // optimizer steps taken
  int64_t tokens_seen = 0;  // global tokens consumed
  int64_t global_batch = 0; // samples per optimizer step over all ranks
};

struct StateRefs {
  model::Gpt& gpt;
  torch::optim::AdamW& optimizer;
  LocalSgd& local_sgd;
  data::Loader& loader;
  bool optimizer_per_rank;  // local SGD with local moments: replicas' moments differ
};

checkpoint::Snapshot capture_state(const StateRefs& refs, const Counters& counters, const std::string& config_toml,
                                   comm::Communicator& comm);

// Throws ht::Error(kUsage) if the snapshot does not fit the model (names the first mismatching
// parameter) or the global batch differs.
void restore_state(const StateRefs& refs, Counters& counters, const checkpoint::Snapshot& snap);

// Generator states as uint8 tensors (CPU; CUDA device 0..n when available).
torch::Tensor cpu_rng_state();
void set_cpu_rng_state(const torch::Tensor& state);

}  // namespace ht::train
