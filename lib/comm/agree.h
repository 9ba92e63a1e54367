// Agreement across ranks on one 64-bit value (a hash of shapes and settings, a parameter
// checksum): which ranks differ from rank 0, reported identically on every rank so that all of
// them take the same branch, and the checks built on it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/hash.h"

namespace ht::comm {

struct Disagreement {
  uint64_t root_value = 0;
  std::vector<int> ranks;             // ranks whose value differs from rank 0's (empty: all agree)
  std::vector<uint64_t> their_values; // the value of each of those ranks
  // "1, 3" or, with values, "rank 1 (00ab...), rank 3 (...)".
  std::string list(bool with_values) const;
};

// Collective (allgather of one value per rank); the same result on every rank.
Disagreement compare_with_root(Communicator& comm, uint64_t value);

// Collective: runs fn on every rank (fn itself must not call collectives; work of one rank is an
// fn that does nothing elsewhere). If fn threw on any rank, every rank throws ht::AgreedError with
// the exit code and message of the lowest failing rank, so the job ends once, cleanly, instead of
// each rank aborting it. An exception that is not an ht::Error carries `other_code`. This is the
// one way ranks agree on a failure: checkpoint I/O, set-up, inspect and the phases all use it.
void run_agreed(Communicator& comm, const std::function<void()>& fn, ExitCode other_code = ExitCode::kRuntime);

// Collective: throws ht::Error(code) on every rank when any rank's value differs from rank 0's.
// The message is `what` followed by the differing ranks and their values.
void require_agreement(Communicator& comm, uint64_t value, ExitCode code, const std::string& what);

// Collective: require_agreement, and the sum over the ranks of `addend` (added in rank order, the
// same on every rank) carried in the same allgather: a check that rides along with a reduction
// costs one small collective instead of two.
double require_agreement_summing(Communicator& comm, uint64_t value, double addend, ExitCode code,
                                 const std::string& what);

}  // namespace ht::comm
