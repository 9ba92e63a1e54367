// Internal: the on-disk layout of one checkpoint file (docs/checkpoint-format.md) — writing a
// Snapshot plus every rank's per-rank entries to an HDF5 file, and scanning a file back with
// every dataset read (so HDF5 verifies each chunk's Fletcher32 checksum).
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace ht::checkpoint::detail {

using TensorMap = std::map<std::string, torch::Tensor>;

struct FileContents {
  Snapshot shared;                   // per_rank left empty; world_size and step from the root attributes
  std::vector<TensorMap> per_rank;   // index = rank of the run that wrote the file
  std::map<std::string, std::string> provenance;  // root attributes as text (for describe)
};

// Writes the file at `path` (truncating). Tensors keep dtype and shape; see the format doc for
// bf16/f16/bool and 0-d tensors. Throws ht::Error(kData) naming the file and the key on failure.
// Honours HPCTRAIN_TEST_SLOW_SAVE_MS (sleeps half-way through, for crash tests).
void write_file(const std::string& path, const Snapshot& shared, const std::vector<TensorMap>& per_rank,
                int64_t step, int64_t world_size);

struct Scan {
  FileContents contents;
  std::vector<std::string> faults;  // empty = file verified
  int64_t datasets = 0;
  int64_t bytes = 0;
};
// Reads everything it can. stop_at_first: return at the first fault. Never throws for damage
// inside the file; throws ht::Error(kData) only if the file cannot be opened at all.
Scan scan_file(const std::string& path, bool stop_at_first);
// Strict read: throws ht::Error(kData) "<path>: <first fault>" if anything fails to verify.
FileContents read_contents(const std::string& path);
// The root attribute run_id of a checkpoint file; "" when absent or unreadable.
std::string run_id_of(const std::string& path);

}  // namespace ht::checkpoint::detail
