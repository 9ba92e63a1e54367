// Manager: the collective side of checkpointing. Rank 0 does all file I/O (gathering per-rank
// state first, reading and verifying on load) and broadcasts both its verdict and the state, so
// every rank takes the same branch and nobody waits in a collective for a rank that gave up.
#include <fmt/ranges.h>

#include <algorithm>

#include "checkpoint/checkpoint.h"
#include "checkpoint/files.h"
#include "checkpoint/layout.h"
#include "checkpoint/wire.h"
#include "core/error.h"
#include "core/log.h"

namespace ht::checkpoint {
namespace {

// Rank 0's outcome as one broadcastable string: "O<payload>" success, "N" nothing, "E<code>\n<msg>" failure.
std::string failure(const std::exception& e) {
  const auto* he = dynamic_cast<const Error*>(&e);
  const int code = static_cast<int>(he ? he->code() : ExitCode::kData);
  return fmt::format("E{}\n{}", code, e.what());
}

// Every rank gets rank 0's outcome; all throw the same error on failure.
std::string agree(comm::Communicator& comm, const std::string& outcome) {
  const std::string o = comm.broadcast_string(outcome, 0);
  HT_REQUIRE(!o.empty(), ExitCode::kRuntime, "checkpoint: empty outcome from rank 0");
  if (o[0] == 'E') {
    const size_t nl = o.find('\n');
    throw AgreedError(static_cast<ExitCode>(std::stoi(o.substr(1, nl - 1))), o.substr(nl + 1));
  }
  return o;
}

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
  std::string outcome;
  if (comm_.rank() == 0) {
    try {
      outcome = "O" + detail::commit_checkpoint(dir_, s, per_rank, step, comm_.size(), keep_);
    } catch (const std::exception& e) {
      outcome = failure(e);
    }
  }
  return agree(comm_, outcome).substr(1);
}

std::string Manager::save_best(const Snapshot& s, int64_t step) {
  const std::vector<detail::TensorMap> per_rank = detail::gather_to_root(comm_, s.per_rank);
  std::string outcome;
  if (comm_.rank() == 0) {
    try {
      outcome = "O" + detail::commit_best(dir_, s, per_rank, step, comm_.size());
    } catch (const std::exception& e) {
      outcome = failure(e);
    }
  }
  return agree(comm_, outcome).substr(1);
}

Snapshot Manager::load(const std::string& path) {
  detail::FileContents c;
  std::string outcome;
  if (comm_.rank() == 0) {
    try {
      c = detail::read_contents(path);
      outcome = "O";
    } catch (const std::exception& e) {
      outcome = failure(e);
    }
  }
  agree(comm_, outcome);
  Snapshot s = distribute(comm_, &c);
  HT_INFO("loaded checkpoint {} (step {})", path, s.step);
  return s;
}

std::optional<Snapshot> Manager::load_latest() {
  detail::FileContents c;
  std::string outcome = "N";
  if (comm_.rank() == 0) {
    try {
      const auto candidates = detail::load_candidates(dir_);
      std::vector<std::string> faults;
      for (size_t i = 0; i < candidates.size() && outcome == "N"; ++i) {
        try {
          c = detail::read_contents(candidates[i]);
          outcome = "O";
        } catch (const std::exception& e) {
          std::string why = e.what();
          if (why.rfind(candidates[i] + ": ", 0) == 0) why = why.substr(candidates[i].size() + 2);
          faults.push_back(fmt::format("{}: {}", candidates[i], why));
          if (i + 1 < candidates.size())
            HT_WARN("checkpoint {} is damaged ({}); falling back to {}", candidates[i], why, candidates[i + 1]);
        }
      }
      if (outcome == "N" && !faults.empty())
        HT_FAIL(ExitCode::kData, "no valid checkpoint in {}: {}", dir_, fmt::join(faults, "; "));
    } catch (const std::exception& e) {
      outcome = failure(e);
    }
  }
  if (agree(comm_, outcome) == "N") return std::nullopt;
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
