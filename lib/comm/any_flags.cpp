#include "comm/any_flags.h"

#include "core/error.h"

namespace ht::comm {

namespace {
constexpr int kTag = 0;  // the communicator is the round's own (any_flags.h)
}

AnyFlags::AnyFlags(Communicator& comm, std::initializer_list<bool> flags, int max_peers) : count_(flags.size()) {
  HT_REQUIRE(count_ >= 1 && count_ <= kMaxFlags, ExitCode::kRuntime, "AnyFlags takes 1 to {} flags, got {}",
             kMaxFlags, count_);
  size_t i = 0;
  for (bool f : flags) mine_[i++] = f ? 1 : 0;
  const int world = comm.size();
  if (world == 1) return;
  if (world - 1 > max_peers) {
    request_ = comm.iallreduce(mine_.data(), count_, DType::kI64, ReduceOp::kMax);
    return;
  }
  theirs_.resize(static_cast<size_t>(world - 1) * count_);
  const size_t bytes = count_ * sizeof(int64_t);
  std::vector<Communicator::Message> sends, recvs;
  for (int peer = 0, slot = 0; peer < world; ++peer) {
    if (peer == comm.rank()) continue;
    sends.push_back({mine_.data(), bytes, peer});
    recvs.push_back({theirs_.data() + static_cast<size_t>(slot++) * count_, bytes, peer});
  }
  request_ = comm.iexchange(sends, recvs, kTag);
}

std::vector<bool> AnyFlags::wait() {
  if (request_ && !done_) request_->wait();
  done_ = true;
  std::vector<bool> any(count_);
  for (size_t i = 0; i < count_; ++i) {
    bool set = mine_[i] != 0;
    for (size_t j = i; j < theirs_.size() && !set; j += count_) set = theirs_[j] != 0;
    any[i] = set;
  }
  return any;
}

}  // namespace ht::comm
