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

inline constexpr const char* kFormatName = "hpctrain-checkpoint";
inline constexpr int64_t kFormatVersion = 1;

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
  // Filled on load (ignored by save): the root attribute `step` and the file the snapshot came from.
  int64_t step = -1;
  std::string path;
};

class Manager {
 public:
  Manager(std::string dir, int64_t keep, comm::Communicator& comm);
  // Collective. Rank 0 writes <dir>/ckpt-<step>.h5 via tmp -> fsync -> rename -> fsync(dir),
  // then updates <dir>/latest atomically and deletes all but the newest `keep`. Returns the path.
  // Every rank throws the same ht::Error(kData) if the write failed (previous checkpoints intact).
  std::string save(const Snapshot& s, int64_t step);
  // Collective. Newest checkpoint that verifies (falls back with a warning); nullopt if the
  // directory holds no checkpoint at all; ht::Error(kData) if it holds some but none verifies.
  std::optional<Snapshot> load_latest();
  // Collective. Loads and verifies one file; throws ht::Error(kData) if damaged.
  Snapshot load(const std::string& path);

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int64_t keep_;
  comm::Communicator& comm_;
};

// --- Local (non-collective) helpers: tools, eval, tests. -----------------------------------------

// Creates the checkpoint directory (and parents) if needed; throws ht::Error(kData) naming it if
// that fails or it is not writable. Lets a trainer fail at setup rather than at its first save.
void prepare_directory(const std::string& dir);
// "ckpt-00000010.h5" for step 10.
std::string file_name_for_step(int64_t step);
// Final checkpoint files (ckpt-<step>.h5) in dir, newest step first; empty if dir is missing.
std::vector<std::string> list_checkpoints(const std::string& dir);

// Reads and verifies a whole file from this process alone; per_rank holds the entries of old
// rank (rank % world_size of the file). Throws ht::Error(kData) naming the file and the fault.
Snapshot read_file(const std::string& path, int rank = 0);

struct Verification {
  bool ok = false;
  std::string message;      // "" when ok; otherwise the first faults found
  int64_t datasets = 0;     // datasets read and checksum-verified
  int64_t bytes = 0;        // payload bytes read
};
// Reads every dataset (Fletcher32 verified by HDF5) and checks the format attributes. Never throws.
Verification verify(const std::string& path);

// Human-readable report for `hpctrain inspect`: provenance, step, state values, config, parameter
// table (name, shape, dtype, L2 norm), other tensors, per-rank entries, checksum verdict.
// *ok (if given) is set to whether the file verified. Throws only if the file cannot be opened.
std::string describe(const std::string& path, bool* ok = nullptr);

// Throws ht::Error(kUsage) naming the first parameter whose presence or shape differs between the
// checkpoint's "model/<name>" tensors and the model's named parameters.
void check_compatible(const Snapshot& file, const std::map<std::string, torch::Tensor>& model_params);

}  // namespace ht::checkpoint
