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
  const int64_t per = k.count / world;
  const size_t bytes = static_cast<size_t>(per) * static_cast<size_t>(wire_.element_size());
  std::vector<Communicator::Message> sends, recvs;
  for (int j = 0; j < world; ++j) {
    if (j == me) continue;
    sends.push_back({at(wire_, k.begin + j * per), bytes, j});   // my copy of rank j's chunk
    recvs.push_back({at(recv_, k.begin + j * per), bytes, j});   // rank j's copy of my chunk: row j
  }
  k.req = comm_.iexchange(sends, recvs, static_cast<int>(2 * b));
  k.phase = Phase::kScatter;
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
  if (dtype_ == ExchangeDType::kF32) {
    // ((x_0 + x_1) + x_2) + ...: the order MPI_Allreduce's recursive doubling gives on 2 and 3
    // ranks; accumulated in row 0 (no zero start, so -0.0 sums keep their sign as in MPI).
    auto acc = rows[0];
    for (int r = 1; r < world; ++r) acc.add_(rows[r]);
    mine.copy_(acc.mul_(1.0 / world));
  } else {
    // The 16-bit exchange of ParamAverager::finish_16bit_bucket: fp32 sum, scale, one rounding.
    mine.copy_(rows.sum(0, false, torch::kFloat).mul_(1.0 / world));
  }
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

void BucketReducer::progress() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto& k = buckets_[b];
    if (k.phase == Phase::kScatter && k.req->test()) {
      reduce_and_gather(b);
    } else if (k.phase == Phase::kGather && k.req->test()) {
      k.phase = Phase::kDone;
    }
  }
}

void BucketReducer::finish() {
  for (size_t b = buckets_.size(); b-- > 0;)
    if (buckets_[b].phase == Phase::kIdle) start(b);
  // Reduce-scatters in the order they were most likely started (highest bucket first).
  for (size_t b = buckets_.size(); b-- > 0;) {
    auto& k = buckets_[b];
    if (k.phase != Phase::kScatter) continue;
    k.req->wait();
    reduce_and_gather(b);
  }
  for (auto& k : buckets_) {
    if (k.phase == Phase::kGather) k.req->wait();
    if (!wire_.is_same(flat_) && comm_.size() > 1) flat_.narrow(0, k.begin, k.count).copy_(wire_.narrow(0, k.begin, k.count));
    k.phase = Phase::kIdle;
    k.req.reset();
  }
  started_ = 0;
}

}  // namespace ht::comm
