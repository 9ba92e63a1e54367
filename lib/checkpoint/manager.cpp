// Manager: the collective side of checkpointing. Rank 0 does all file I/O (gathering per-rank
// state first, reading and verifying on load) inside comm::run_agreed, which gives every rank its
// verdict, and then broadcasts the state, so every rank takes the same branch and nobody waits in
// a collective for a rank that gave up. A failure that is not an ht::Error counts as bad data.
#include <fmt/ranges.h>

#include <algorithm>

#include "checkpoint/checkpoint.h"
#include "checkpoint/files.h"
#include "checkpoint/layout.h"
#include "checkpoint/wire.h"
#include "comm/agree.h"
#include "core/error.h"
#include "core/log.h"

namespace ht::checkpoint {
namespace {

// After a successful read on rank 0: shared state to everyone, per-rank state of old rank
// r % old_world to rank r.
Snapshot distribute(comm::Communicator& comm, detail::FileContents* c) {
  Snapshot s;
  if (comm.rank() == 0) s = std::move(c->shared);
  detail::broadcast_scalars(comm, s, 0);
  detail::broadcast_tensors(comm, s.tensors, 0);
  const int64_t old_world = s.world_size, world = comm.size();
  // Point-to-point from rank 0: each rank receives only its own per-rank state.
  if (comm.rank() == 0) {
    for (int r = 1; r < world; ++r)
      detail::send_tensors(comm, detail::normalized(c->per_rank[static_cast<size_t>(r % old_world)]), r);
    s.per_rank = std::move(c->per_rank[0]);
  } else {
    s.per_rank = detail::recv_tensors(comm, 0);
  }
  if (old_world != world)
    HT_INFO("checkpoint was written by {} ranks, this run has {}: rank r continues with the per-rank state of "
            "old rank r % {}", old_world, world, old_world);
  return s;
}

}  // namespace

Manager::Manager(std::string dir, int64_t keep, comm::Communicator& comm)
    : dir_(std::move(dir)), keep_(keep), comm_(comm) {
  HT_REQUIRE(keep_ >= 1, ExitCode::kUsage, "checkpoint.keep must be at least 1 (got {})", keep_);
}

std::string Manager::save(const Snapshot& s, int64_t step) {
  const std::vector<detail::TensorMap> per_rank = detail::gather_to_root(comm_, s.per_rank);
  std::string path;
  comm::run_agreed(comm_, [&] {
    if (comm_.rank() == 0) path = detail::commit_checkpoint(dir_, s, per_rank, step, comm_.size(), keep_);
  }, ExitCode::kData);
  return comm_.broadcast_string(path, 0);
}

std::string Manager::save_best(const Snapshot& s, int64_t step) {
  const std::vector<detail::TensorMap> per_rank = detail::gather_to_root(comm_, s.per_rank);
  std::string path;
  comm::run_agreed(comm_, [&] {
    if (comm_.rank() == 0) path = detail::commit_best(dir_, s, per_rank, step, comm_.size());
  }, ExitCode::kData);
  return comm_.broadcast_string(path, 0);
}

Snapshot Manager::load(const std::string& path) {
  detail::FileContents c;
  comm::run_agreed(comm_, [&] {
    if (comm_.rank() == 0) c = detail::read_contents(path);
  }, ExitCode::kData);
  Snapshot s = distribute(comm_, &c);
  HT_INFO("loaded checkpoint {} (step {})", path, s.step);
  return s;
}

namespace {

// Rank 0 reads the newest checkpoint that verifies, falling back over damaged ones.
bool read_latest(const std::string& dir, detail::FileContents& c) {
  const auto candidates = detail::load_candidates(dir);
  std::vector<std::string> faults;
  for (size_t i = 0; i < candidates.size(); ++i) {
    try {
      c = detail::read_contents(candidates[i]);
      return true;
    } catch (const std::exception& e) {
      std::string why = e.what();
      if (why.rfind(candidates[i] + ": ", 0) == 0) why = why.substr(candidates[i].size() + 2);
      faults.push_back(fmt::format("{}: {}", candidates[i], why));
      if (i + 1 < candidates.size())
        HT_WARN("checkpoint {} is damaged ({}); falling back to {}", candidates[i], why, candidates[i + 1]);
    }
  }
  HT_REQUIRE(faults.empty(), ExitCode::kData, "no valid checkpoint in {}: {}", dir, fmt::join(faults, "; "));
  return false;
}

}  // namespace

std::optional<Snapshot> Manager::load_latest() {
  detail::FileContents c;
  bool found = false;
  comm::run_agreed(comm_, [&] {
    if (comm_.rank() == 0) found = read_latest(dir_, c);
  }, ExitCode::kData);
  if (comm_.broadcast_string(found ? "found" : "", 0).empty()) return std::nullopt;
  Snapshot s = distribute(comm_, &c);
  HT_INFO("loaded checkpoint {} (step {})", s.path, s.step);
  return s;
}

Snapshot read_file(const std::string& path, int rank) {
  detail::FileContents c = detail::read_contents(path);
  Snapshot s = std::move(c.shared);
  s.per_rank = std::move(c.per_rank[static_cast<size_t>(rank % s.world_size)]);
  return s;
}

Verification verify(const std::string& path) {
  Verification v;
  try {
    const detail::Scan s = detail::scan_file(path, false);
    v.datasets = s.datasets;
    v.bytes = s.bytes;
    v.ok = s.faults.empty();
    for (size_t i = 0; i < s.faults.size() && i < 5; ++i) v.message += (i ? "; " : "") + s.faults[i];
    if (s.faults.size() > 5) v.message += fmt::format("; ... ({} faults in all)", s.faults.size());
  } catch (const std::exception& e) {
    v.ok = false;
    v.message = e.what();
  }
  return v;
}

}  // namespace ht::checkpoint
