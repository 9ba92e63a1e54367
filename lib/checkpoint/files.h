// Internal: the crash-safe file protocol of the checkpoint directory. A checkpoint appears under
// its final name only once complete and durable: write <name>.tmp, close, fsync, rename, fsync
// the directory; then `latest` is replaced the same way and old checkpoints are rotated out.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/layout.h"

namespace ht::checkpoint::detail {

// The whole protocol (rank 0 only). Returns the final path. On failure nothing carries the final
// name (the .tmp is removed) and earlier checkpoints and `latest` are untouched.
std::string commit_checkpoint(const std::string& dir, const Snapshot& shared, const std::vector<TensorMap>& per_rank,
                              int64_t step, int64_t world_size, int64_t keep);
// The same protocol for the best checkpoint: <dir>/best-<step>.h5 (outside the rotation, whose
// pattern is ckpt-<step>.h5), then the pointer `best`, then this run's earlier best files go.
std::string commit_best(const std::string& dir, const Snapshot& shared, const std::vector<TensorMap>& per_rank,
                        int64_t step, int64_t world_size);
// The file name `latest` holds, if the pointer exists and is well-formed.
std::optional<std::string> read_latest(const std::string& dir);
// The file name `best` holds, if the pointer exists and is well-formed.
std::optional<std::string> read_best(const std::string& dir);
// Load order: the file `latest` names, then every other checkpoint, newest step first.
std::vector<std::string> load_candidates(const std::string& dir);

}  // namespace ht::checkpoint::detail
