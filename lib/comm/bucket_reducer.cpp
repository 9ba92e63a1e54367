// Bucketed point-to-point mean of a flat buffer (see bucket_reducer.h for the design).
#include "comm/bucket_reducer.h"

#include <algorithm>
#include <exception>

#include "core/error.h"
#include "core/log.h"

namespace ht::comm {

namespace {

// Tags of bucket b: 2b for its reduce-scatter, 2b + 1 for its all-gather (iexchange: [0, 24000)).
constexpr size_t kMaxBuckets = 12000;

torch::ScalarType wire_type(ExchangeDType t) {
  switch (t) {
    case ExchangeDType::kBF16: return torch::kBFloat16;
    case ExchangeDType::kF16: return torch::kHalf;
    case ExchangeDType::kF32: break;
    case ExchangeDType::kI8:
    case ExchangeDType::kI4: break;  // refused by the constructor before the wire is made
  }
  return torch::kFloat;
}

}  // namespace

BucketReducer::BucketReducer(Communicator& comm, torch::Tensor flat, int64_t bucket_elems, ExchangeDType dtype,
                             std::string name)
    : comm_(comm), name_(std::move(name)), dtype_(dtype), flat_(std::move(flat)) {
  const int64_t world = comm_.size();
  HT_REQUIRE(!is_quantized(dtype_), ExitCode::kUsage,
             "BucketReducer({}): the overlapped bucket exchange carries fp32, bf16 or fp16, not {}", name_,
             to_string(dtype_));
  HT_REQUIRE(flat_.defined() && flat_.is_cpu() && flat_.scalar_type() == torch::kFloat && flat_.is_contiguous() &&
                 flat_.dim() == 1,
             ExitCode::kRuntime, "BucketReducer({}): needs a contiguous 1-d fp32 CPU buffer", name_);
  const int64_t n = flat_.numel();
  HT_REQUIRE(n % world == 0, ExitCode::kRuntime, "BucketReducer({}): {} elements is not a multiple of {} ranks", name_,
             n, world);
  const int64_t per_bucket = std::max(world, bucket_elems / world * world);
  for (int64_t b = 0; b < n; b += per_bucket) {
    Bucket k;
    k.begin = b;
    k.count = std::min(per_bucket, n - b);
    buckets_.push_back(std::move(k));
  }
  HT_REQUIRE(buckets_.size() <= kMaxBuckets, ExitCode::kUsage,
             "BucketReducer({}): {} buckets of {} elements; at most {} (raise the bucket size)", name_,
             buckets_.size(), per_bucket, kMaxBuckets);
  wire_ = dtype_ == ExchangeDType::kF32 ? flat_ : torch::zeros({n}, torch::TensorOptions().dtype(wire_type(dtype_)));
  recv_ = torch::zeros({n}, torch::TensorOptions().dtype(wire_type(dtype_)));
  ring_ = dtype_ == ExchangeDType::kF32;
}

BucketReducer::~BucketReducer() {
  if (started_ == 0) return;
  if (std::uncaught_exceptions() > 0) {
    // Unwinding from an error: a peer may never send, so waiting could hang. The job is ending;
    // the requests and their buffers are left alive (leaked) so MPI never writes to freed memory.
    HT_WARN("BucketReducer({}): {} bucket exchange(s) left in flight while unwinding from an error", name_, started_);
    for (auto& b : buckets_) static_cast<void>(b.req.release());
    new torch::Tensor(recv_);
    new torch::Tensor(wire_);
    new torch::Tensor(flat_);
    return;
  }
  try {
    for (auto& b : buckets_)
      if (b.req) b.req->wait();
  } catch (const std::exception& e) {
    HT_ERROR("BucketReducer({}): completing the exchange in flight failed: {}", name_, e.what());
  }
}

size_t BucketReducer::completed_count() const {
  return static_cast<size_t>(
      std::count_if(buckets_.begin(), buckets_.end(), [](const Bucket& k) { return k.phase == Phase::kDone; }));
}

uint64_t BucketReducer::bytes_per_round() const {
  return static_cast<uint64_t>(flat_.numel()) * static_cast<uint64_t>(wire_.element_size());
}

void* BucketReducer::at(const torch::Tensor& buf, int64_t elem) const {
  return static_cast<char*>(buf.data_ptr()) + elem * static_cast<int64_t>(buf.element_size());
}

void BucketReducer::start(size_t b) {
  auto& k = buckets_.at(b);
  HT_REQUIRE(k.phase == Phase::kIdle, ExitCode::kRuntime, "BucketReducer({}): bucket {} started twice in one round",
             name_, b);
  ++started_;
  const int world = comm_.size(), me = comm_.rank();
  if (world == 1) {
    k.phase = Phase::kDone;
    return;
  }
  if (!wire_.is_same(flat_)) wire_.narrow(0, k.begin, k.count).copy_(flat_.narrow(0, k.begin, k.count));
  k.phase = Phase::kScatter;
  k.step = 0;
  if (ring_) {
    post_ring_step(b);
    return;
  }
  const int64_t per = k.count / world;
  const size_t bytes = static_cast<size_t>(per) * static_cast<size_t>(wire_.element_size());
  std::vector<Communicator::Message> sends, recvs;
  for (int j = 0; j < world; ++j) {
    if (j == me) continue;
    sends.push_back({at(wire_, k.begin + j * per), bytes, j});   // my copy of rank j's chunk
    recvs.push_back({at(recv_, k.begin + j * per), bytes, j});   // rank j's copy of my chunk: row j
  }
  k.req = comm_.iexchange(sends, recvs, static_cast<int>(2 * b));
}

// Ring step s of bucket b. Chunk c's partial sum starts on rank c + 1 and travels to the right,
// each rank adding its own copy, so in the reduce-scatter rank r sends the partial of chunk
// r - 1 - s and receives that of chunk r - 2 - s (its own chunk, complete, at s = W - 2); in the
// all-gather it forwards chunk r - s and receives chunk r - 1 - s. One message each way per step.
void BucketReducer::post_ring_step(size_t b) {
  auto& k = buckets_[b];
  const int world = comm_.size(), me = comm_.rank();
  const int right = (me + 1) % world, left = (me + world - 1) % world;
  const int64_t per = k.count / world;
  const size_t bytes = static_cast<size_t>(per) * static_cast<size_t>(wire_.element_size());
  auto chunk = [&](int c) { return k.begin + static_cast<int64_t>(((c % world) + world) % world) * per; };
  const bool scatter = k.phase == Phase::kScatter;
  const int send_chunk = scatter ? me - 1 - k.step : me - k.step;
  const int recv_chunk = scatter ? me - 2 - k.step : me - 1 - k.step;
  // Reduce-scatter partials land in recv_ (added to wire_ when they arrive); all-gather means in wire_.
  const Communicator::Message send{at(wire_, chunk(send_chunk)), bytes, right};
  const Communicator::Message recv{at(scatter ? recv_ : wire_, chunk(recv_chunk)), bytes, left};
  k.req = comm_.iexchange({send}, {recv}, static_cast<int>(scatter ? 2 * b : 2 * b + 1));
}

// Rows of this rank's chunk have arrived: sum them in rank order, scale, send the mean to everyone.
void BucketReducer::reduce_and_gather(size_t b) {
  auto& k = buckets_[b];
  const int world = comm_.size(), me = comm_.rank();
  const int64_t per = k.count / world;
  auto rows = recv_.narrow(0, k.begin, k.count).view({world, per});
  auto mine = wire_.narrow(0, k.begin + me * per, per);
  rows[me].copy_(mine);
  torch::NoGradGuard no_grad;
  // The 16-bit exchange of ParamAverager::finish_16bit_bucket: fp32 sum, scale, one rounding.
  mine.copy_(rows.sum(0, false, torch::kFloat).mul_(1.0 / world));
  const size_t bytes = static_cast<size_t>(per) * static_cast<size_t>(wire_.element_size());
  std::vector<Communicator::Message> sends, recvs;
  for (int j = 0; j < world; ++j) {
    if (j == me) continue;
    sends.push_back({at(wire_, k.begin + me * per), bytes, j});
    recvs.push_back({at(wire_, k.begin + j * per), bytes, j});
  }
  k.req = comm_.iexchange(sends, recvs, static_cast<int>(2 * b + 1));
  k.phase = Phase::kGather;
}

// Bucket b's messages in flight have completed: take the next step.
void BucketReducer::advance(size_t b) {
  auto& k = buckets_[b];
  const int world = comm_.size(), me = comm_.rank();
  if (!ring_) {
    if (k.phase == Phase::kScatter)
      reduce_and_gather(b);
    else
      k.phase = Phase::kDone;
    return;
  }
  const int64_t per = k.count / world;
  ++k.step;
  if (k.phase == Phase::kScatter) {
    // The partial that arrived plus this rank's own copy: (... + x_{r-1}) + x_r.
    const int c = ((me - 1 - k.step) % world + world) % world;
    torch::NoGradGuard no_grad;
    wire_.narrow(0, k.begin + c * per, per).add_(recv_.narrow(0, k.begin + c * per, per));
    if (k.step == world - 1) {
      wire_.narrow(0, k.begin + me * per, per).mul_(1.0 / world);
      k.phase = Phase::kGather;
      k.step = 0;
    }
  } else if (k.step == world - 1) {
    k.phase = Phase::kDone;
    return;
  }
  post_ring_step(b);
}

void BucketReducer::progress() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto& k = buckets_[b];
    if ((k.phase == Phase::kScatter || k.phase == Phase::kGather) && k.req->test()) advance(b);
  }
}

void BucketReducer::finish() {
  for (size_t b = buckets_.size(); b-- > 0;)
    if (buckets_[b].phase == Phase::kIdle) start(b);
  // Take every step that is ready; when none is, sleep in MPI on the bucket most likely furthest
  // along (the highest, started first), then look at all of them again.
  for (;;) {
    progress();
    const auto first_in_flight = std::find_if(buckets_.rbegin(), buckets_.rend(), [](const Bucket& k) {
      return k.phase == Phase::kScatter || k.phase == Phase::kGather;
    });
    if (first_in_flight == buckets_.rend()) break;
    first_in_flight->req->wait();
    advance(static_cast<size_t>(buckets_.rend() - first_in_flight) - 1);
  }
  for (auto& k : buckets_) {
    if (!wire_.is_same(flat_) && comm_.size() > 1) flat_.narrow(0, k.begin, k.count).copy_(wire_.narrow(0, k.begin, k.count));
    k.phase = Phase::kIdle;
    k.req.reset();
  }
  started_ = 0;
}

}  // namespace ht::comm
