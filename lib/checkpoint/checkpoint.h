// Checkpoint files (HDF5): save, load, verify, rotate, `latest` pointer, and whether a checkpoint
// fits a model. Layout: docs/checkpoint-format.md. Not to be confused with lib/recompute
// (activation recompute).
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

// Where each kind of state lives in a checkpoint (docs/checkpoint-format.md): the one place that
// names them.
inline const std::string kParamPrefix = "model/";              // the (averaged) model's parameters
inline const std::string kBufferPrefix = "model_buffers/";     // its buffers
inline const std::string kOptimizerPrefix = "optimizer/";      // optimizer/<moment>/<param>, optimizer/step/<param>
inline const std::string kStrategyPrefix = "local_sgd/";       // the data-parallel strategy's own state
inline const std::string kReplicaPrefix = "replica/";          // per rank: a replica that differs from /model

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
  // The run this state belongs to (root attribute `run_id`): a resumed run continues its lineage,
  // and rotation only ever deletes files of its own run. Empty in files written before run ids.
  std::string run_id;
  // Seconds of training steps along the run's history up to this state (rank 0's step times; root
  // attribute `train_seconds`, not in /state: it is timing, not state, and differs between two
  // runs that are otherwise bit-identical). 0 in files written before the attribute.
  double train_seconds = 0.0;
  // Filled on load (ignored by save): the root attribute `step` and the file the snapshot came from.
  int64_t step = -1;
  std::string path;
};

class Manager {
 public:
  Manager(std::string dir, int64_t keep, comm::Communicator& comm);
  // Collective. Rank 0 writes <dir>/ckpt-<step>.h5 via tmp -> fsync -> rename -> fsync(dir),
  // then updates <dir>/latest atomically and rotates: of the files of the same run (s.run_id) with
  // a lower step, the newest keep - 1 stay; files of other runs, and files with a higher step (a
  // run resumed from an earlier checkpoint) are never deleted. Returns the path.
  // Every rank throws the same ht::Error(kData) if the write failed (previous checkpoints intact).
  std::string save(const Snapshot& s, int64_t step);
  // Collective. The best checkpoint: <dir>/best-<step>.h5 with the same crash-safe protocol, then
  // the pointer <dir>/best; never rotated; the run's previous best file is deleted. Returns the path.
  std::string save_best(const Snapshot& s, int64_t step);
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

// A new run id: host, pid, time and random bits (rank 0 makes one; the trainer shares it).
std::string new_run_id();
// "ckpt-00000010.h5" for step 10.
std::string file_name_for_step(int64_t step);
// "best-00000010.h5": the best checkpoint of step 10 (checkpoint.keep_best).
std::string best_file_name_for_step(int64_t step);
// The file a pointer ("latest" or "best") in dir names, as a path. Throws ht::Error(kData) naming
// the pointer when it is missing or names no file.
std::string resolve_pointer(const std::string& dir, const std::string& pointer);
// Final checkpoint files (ckpt-<step>.h5) in dir, newest step first; empty if dir is missing.
std::vector<std::string> list_checkpoints(const std::string& dir);

// Reads and verifies a whole file from this process alone; per_rank holds the entries of old
// rank (rank % world_size of the file). Throws ht::Error(kData) naming the file and the fault.
Snapshot read_file(const std::string& path, int rank = 0);

// The resolved config stored in a checkpoint (/config) as TOML text. Throws ht::Error(kData)
// naming the file when it is not an hpctrain checkpoint or holds no config.
std::string read_config_text(const std::string& path);
// True when the file's root attribute `format` names a checkpoint (a cheap look for `inspect`).
bool is_checkpoint_file(const std::string& path);

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

// What a run expects of a checkpoint: the model's tensors by name (shape and dtype are compared)
// and, when it resumes training, the optimizer state.
struct Expectation {
  std::map<std::string, torch::Tensor> params;   // "wte.weight" -> parameter
  std::map<std::string, torch::Tensor> buffers;  // "name" -> float buffer
  bool optimizer = false;        // resume: the optimizer's moments must fit the parameters too
  bool moments_per_rank = false; // this run keeps the moments per rank (local SGD)
  std::vector<std::string> moment_names;  // the moments this run's optimizer keeps (e.g. exp_avg, exp_avg_sq)
  std::string optimizer_name;             // its train.optimizer value, for messages
};
// Every parameter and buffer of the module by name: what a checkpoint of it must hold.
Expectation expectation_of(const torch::nn::Module& module);
// Copies the checkpoint's model (/model, /model_buffers) into the module's tensors (after
// check_compatible); parameters whose name starts with skip_prefix (if not empty) keep their values.
void load_model(const Snapshot& snap, torch::nn::Module& module, const std::string& skip_prefix = "");

// The one answer to "does this checkpoint fit this model?", used by resume, eval and inspect.
// Both directions: every parameter of the model is in the file with the same shape and dtype, and
// every tensor under model/ in the file is a parameter of the model (a truncated or different
// model is refused); with want.optimizer, every moment belongs to a parameter and has its shape,
// and per-rank moments are accepted only by a run that keeps them per rank (otherwise the
// replicas would silently drift apart). Throws ht::Error(kUsage) naming the file, the tensor and
// what to change.
void check_compatible(const Snapshot& file, const Expectation& want);

}  // namespace ht::checkpoint
