// Mean of a flat fp32 buffer across ranks, bucket by bucket, each bucket started as soon as its
// values are final (the gradient buckets of train/grad_overlap.h start during backward).
//
// A bucket goes as a reduce-scatter and then an all-gather of its W chunks, in tagged
// point-to-point messages (Communicator::iexchange). Each rank sends 2 (W-1)/W x bucket bytes, what
// a ring all-reduce sends.
// - fp32: a ring. In W - 1 steps each partial sum travels one rank to the right, which adds its own
//   copy; then the W means travel the ring in W - 1 more. Every message of every bucket goes to the
//   right neighbour on one TCP connection: on a capped link, messages to all W - 1 peers at once
//   (the 16-bit path below) moved the same bytes ~25 % slower, and one peer at a time in turn ~85 %
//   slower (4 emulated nodes at 20 Mbit/s, docs/scaling.md). Chunk j's mean is
//   ((x_{j+1} + x_{j+2}) + ... + x_j) x (1/W), indices mod W, on every rank.
// - bf16/fp16 with fp32 accumulation: rank r receives every rank's 16-bit copy of its chunk j = r,
//   adds the rows in rank order in fp32, scales, rounds once and sends the mean to every rank:
//   exactly ParamAverager's 16-bit exchange (a ring would round every partial sum).
//
// Why point-to-point and not MPI_Iallreduce:
// - values: each element's sum order is fixed by the bucket layout alone (which chunk of which
//   bucket it is in), not by the timing or the MPI library's algorithm choice; so the bucket
//   schedule (started during backward, or all at the end) never changes a bit of the result;
// - order: collectives must be started in the same order on every rank; messages match by peer
//   and tag, so each rank starts a bucket when its own values are ready, and takes each next step
//   whenever the previous one's data has arrived;
// - the link: Open MPI's libnbc runs an in-place MPI_Iallreduce on fewer than 4 ranks as reduce to
//   one root + broadcast, so each byte crosses a link twice, one direction at a time.
// Progress: without a progress thread, Open MPI moves data only inside MPI calls; the kernel's
// socket buffers carry what was handed to them meanwhile. progress() (MPI_Test underneath) is
// cheap and takes every step that is ready; call it often while other work runs. Host (CPU)
// buffers only.
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
  // Drives the exchanges in flight: each bucket whose messages have arrived takes its next step
  // (adds a partial sum, starts its all-gather, forwards a mean). Never blocks.
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
    int step = 0;  // ring step within the phase, 0 .. W-2
    std::unique_ptr<Request> req;
  };
  void post_ring_step(size_t b);
  void reduce_and_gather(size_t b);  // the 16-bit exchange's reduce, then its all-gather
  void advance(size_t b);            // bucket b's messages in flight have completed
  void* at(const torch::Tensor& buf, int64_t elem) const;

  Communicator& comm_;
  std::string name_;
  ExchangeDType dtype_;
  torch::Tensor flat_;  // fp32, the caller's
  torch::Tensor wire_;  // what is sent: flat_ itself (fp32) or its 16-bit copy
  torch::Tensor recv_;  // reduce-scatter arrivals: ring partials at their chunk; 16-bit: bucket b's
                        // [W, count / W] block holds row j from rank j
  bool ring_ = false;   // fp32: the ring; 16-bit: the all-to-all rows
  std::vector<Bucket> buckets_;
  size_t started_ = 0;
};

}  // namespace ht::comm
