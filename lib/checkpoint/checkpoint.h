// Checkpoint files (HDF5): save, load, verify, rotate, `latest` pointer. Layout: docs/checkpoint-format.md.
// CONTRACT header written before the implementation; the checkpoint module owns and may extend it.
// Not to be confused with lib/recompute (activation recompute).
#pragma once
#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ht::checkpoint {

// Everything a run needs to continue exactly. Keys are HDF5 paths below the root, e.g.
// "model/blocks.0.attn.qkv.weight", "optimizer/exp_avg/wte.weight", "local_sgd/outer_momentum/...".
struct Snapshot {
  std::map<std::string, torch::Tensor> tensors;   // identical on all ranks: written once by rank 0
  std::map<std::string, int64_t> ints;            // "step", "tokens_seen", "loader/epoch", ...
  std::map<std::string, double> reals;
  std::map<std::string, std::string> strings;     // "config" (resolved TOML)
  // State that differs per rank (RNG, local optimizer moments, ...): gathered and stored per rank.
  // On load with a different world size, rank r gets the entries of old rank r % old_world.
  std::map<std::string, torch::Tensor> per_rank;
  int64_t world_size = 1;
};

class Manager {
 public:
  Manager(std::string dir, int64_t keep, comm::Communicator& comm);
  // Collective. Rank 0 writes <dir>/ckpt-<step>.h5 via tmp -> fsync -> rename -> fsync(dir),
  // then updates <dir>/latest atomically and deletes all but the newest `keep`. Returns the path.
  std::string save(const Snapshot& s, int64_t step);
  // Collective. Newest checkpoint that verifies (falls back with a warning); nullopt if none.
  std::optional<Snapshot> load_latest();
  // Collective. Loads and verifies one file; throws ht::Error(kData) if damaged.
  Snapshot load(const std::string& path);

 private:
  std::string dir_;
  int64_t keep_;
  comm::Communicator& comm_;
};

}  // namespace ht::checkpoint
