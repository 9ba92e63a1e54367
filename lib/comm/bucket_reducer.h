// Mean of a flat fp32 buffer across ranks, bucket by bucket, each bucket started as soon as its
// values are final (the gradient buckets of train/grad_overlap.h start during backward).
//
// A bucket goes in two point-to-point rounds (Communicator::iexchange): a reduce-scatter, where
// rank r receives every rank's copy of its own 1/W chunk of the bucket, adds them in fp32 in rank
// order 0..W-1 and scales by 1/W; then an all-gather of the W reduced chunks. Each rank sends
// 2 (W-1)/W x bucket bytes, what a ring all-reduce sends, in 2 rounds of messages instead of
// 2 (W-1). Exchange in fp32, or in bf16/fp16 with fp32 accumulation: the values are rounded once
// before the reduce-scatter and the mean once before the all-gather, exactly as
// ParamAverager's 16-bit exchange does.
//
// Why point-to-point and not MPI_Iallreduce:
// - values: every element's mean is ((x_0 + x_1) + ... + x_{W-1}) x (1/W) on every rank, whatever
//   the bucket layout, the timing or the MPI library's algorithm choice; so the bucket schedule
//   (started during backward, or all at the end) never changes a bit of the result;
// - order: collectives must be started in the same order on every rank; messages match by peer
//   and tag, so each rank starts a bucket when its own values are ready, and moves a bucket from
//   the reduce-scatter to the all-gather whenever its data has arrived;
// - the link: Open MPI's libnbc runs an in-place MPI_Iallreduce on fewer than 4 ranks as reduce to
//   one root + broadcast, so each byte crosses a link twice, one direction at a time.
// Progress: without a progress thread, Open MPI moves data only inside MPI calls; the kernel's
// socket buffers carry what was handed to them meanwhile. progress() (MPI_Test underneath) is
// cheap; call it often while other work runs. Host (CPU) buffers only.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/param_averager.h"

namespace ht::comm {

class BucketReducer {
 public:
  // flat: fp32, on the CPU, contiguous, numel a multiple of comm.size() (ParamAverager pads its
  // buffer so). bucket_elems: the bucket size in elements (rounded down to a multiple of W, at
  // least W). The buffer is used in place; it must outlive the reducer.
  BucketReducer(Communicator& comm, torch::Tensor flat, int64_t bucket_elems, ExchangeDType dtype, std::string name);
  // Completes a round in flight (never throws: logs), so no message targets freed memory.
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  size_t num_buckets() const { return buckets_.size(); }
  int64_t bucket_begin(size_t b) const { return buckets_[b].begin; }
  int64_t bucket_end(size_t b) const { return buckets_[b].begin + buckets_[b].count; }

  // Bucket b of flat() holds its final local values: starts its exchange. Once per round; the
  // caller must not touch that part of flat() until finish() returns.
  void start(size_t b);
  bool started(size_t b) const { return buckets_[b].phase != Phase::kIdle; }
  // Drives the exchanges in flight; a bucket whose reduce-scatter has arrived is reduced and its
  // all-gather started. Never blocks.
  void progress();
  // Starts every bucket not started yet (highest first), completes all of them, ends the round:
  // flat() holds the mean over ranks.
  void finish();
  // Buckets started in the current round (0 after finish()).
  size_t started_count() const { return started_; }
  // Buckets of the current round whose exchange has completed (seen by progress()).
  size_t completed_count() const;
  // Payload of one round (the whole buffer in the exchange dtype), what ParamAverager::bytes_per_call
  // reports for the same buffer; the wire carries 2 (W-1)/W of it per rank.
  uint64_t bytes_per_round() const;

 private:
  enum class Phase { kIdle, kScatter, kGather, kDone };
  struct Bucket {
    int64_t begin = 0, count = 0;
    Phase phase = Phase::kIdle;
    std::unique_ptr<Request> req;
  };
  void reduce_and_gather(size_t b);
  void* at(const torch::Tensor& buf, int64_t elem) const;

  Communicator& comm_;
  std::string name_;
  ExchangeDType dtype_;
  torch::Tensor flat_;  // fp32, the caller's
  torch::Tensor wire_;  // what is sent: flat_ itself (fp32) or its 16-bit copy
  torch::Tensor recv_;  // reduce-scatter rows: bucket b's [W, count / W] block holds row j from rank j
  std::vector<Bucket> buckets_;
  size_t started_ = 0;
};

}  // namespace ht::comm
