// "Did any rank set flag i?" for a few flags, non-blocking, in one round of point-to-point
// messages: at the start every rank sends its flags to every other rank, and the wait reduces what
// arrived. MPI_Iallreduce would do the same in a reduce and a broadcast (or several doubling
// rounds), and Open MPI advances each round only inside an MPI call of the ranks involved: a rank
// that starts early and waits late would still wait until the others called MPI again. Here the
// others' flags are already in when a rank waits, whenever they sent them. That costs W - 1
// messages per rank, so above max_peers other ranks it falls back to iallreduce.
// Give it a communicator of its own (Communicator::split): its messages carry one fixed tag, and
// rounds started one after another match in order (same peers, same tag).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace ht::comm {

class AnyFlags {
 public:
  static constexpr size_t kMaxFlags = 4;
  static constexpr int kDefaultMaxPeers = 64;

  // Starts the round with this rank's flags (at most kMaxFlags).
  AnyFlags(Communicator& comm, std::initializer_list<bool> flags, int max_peers = kDefaultMaxPeers);
  AnyFlags(const AnyFlags&) = delete;  // MPI writes into the members: the object must not move
  AnyFlags& operator=(const AnyFlags&) = delete;

  // Completes the round: flag i of the result is true when flag i was true on any rank.
  std::vector<bool> wait();
  // True when the round goes point to point (false: iallreduce above max_peers, or a single rank).
  bool point_to_point() const { return !theirs_.empty(); }

 private:
  size_t count_ = 0;
  std::array<int64_t, kMaxFlags> mine_{};  // this rank's flags; the reduced ones on the iallreduce path
  std::vector<int64_t> theirs_;            // count_ flags from each other rank, in rank order
  std::unique_ptr<Request> request_;
  bool done_ = false;
};

}  // namespace ht::comm
