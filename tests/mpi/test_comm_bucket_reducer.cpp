// BucketReducer over real MPI ranks: in fp32 the mean is the ring's sum x 1/W bit for bit (each
// chunk's sum in the ring order its layout fixes), whatever order each rank starts its buckets in
// (even a different order per rank), for every bucket size; on 2 ranks equal to MPI_Allreduce's
// (ParamAverager); the 16-bit exchange equal to ParamAverager's 16-bit path; progress() completes a
// round without finish() waiting; iexchange.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "comm/bucket_reducer.h"
#include "comm/communicator.h"
#include "comm/param_averager.h"
#include "core/error.h"

namespace {

using ht::comm::BucketReducer;
using ht::comm::ExchangeDType;

// What rank r holds: a flat buffer of n values (n a multiple of W), with exact zeros of both signs.
torch::Tensor values_for(int rank, int64_t n) {
  torch::manual_seed(4321 + rank);
  auto t = torch::randn({n});
  t.narrow(0, 0, 4).zero_();
  if (rank % 2 == 0) t.narrow(0, 0, 2).neg_();  // -0.0 on even ranks
  return t;
}

int64_t padded(int64_t n, int world) { return (n + world - 1) / world * world; }

// ((x_0 + x_1) + ... ) x (1/W), in fp32, per element: the 16-bit path's order, not the ring's.
torch::Tensor rank_order_mean(int world, int64_t n) {
  auto acc = values_for(0, n);
  for (int r = 1; r < world; ++r) acc = acc + values_for(r, n);
  return acc.mul_(1.0 / world);
}

// What the fp32 ring gives, written out independently of it: buckets of max(W, bucket_elems / W x W)
// elements, each cut into W chunks; chunk j's sum is ((x_{j+1} + x_{j+2}) + ... + x_j) x (1/W).
torch::Tensor ring_mean(int world, int64_t n, int64_t bucket_elems) {
  std::vector<torch::Tensor> x;
  for (int r = 0; r < world; ++r) x.push_back(values_for(r, n));
  auto out = torch::empty({n});
  const int64_t per_bucket = std::max<int64_t>(world, bucket_elems / world * world);
  for (int64_t begin = 0; begin < n; begin += per_bucket) {
    const int64_t per = std::min(per_bucket, n - begin) / world;
    for (int j = 0; j < world; ++j) {
      const int64_t at = begin + j * per;
      auto acc = x[(j + 1) % world].narrow(0, at, per).clone();
      for (int i = 2; i <= world; ++i) acc = acc + x[(j + i) % world].narrow(0, at, per);
      out.narrow(0, at, per).copy_(acc.mul_(1.0 / world));
    }
  }
  return out;
}

bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.numel() == b.numel() && torch::equal(a.view(torch::kInt), b.view(torch::kInt));
}

std::vector<size_t> order_for(int rank, size_t buckets) {
  std::vector<size_t> order(buckets);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 gen(99 + rank);  // a different start order on every rank
  std::shuffle(order.begin(), order.end(), gen);
  return order;
}

TEST(BucketReducer, MeanIsRingSumForAnyStartOrderAndBucketSize) {
  auto comm = ht::comm::make_mpi_world();
  const int world = comm->size();
  const int64_t n = padded(10007, world);
  for (int64_t bucket : {int64_t{1}, int64_t{world}, int64_t{999}, int64_t{4096}, n, 4 * n}) {
    const auto ref = ring_mean(world, n, bucket);
    if (world >= 3 && bucket >= world) {  // so that the test tells the ring from the rank-order rows
      ASSERT_FALSE(same_bits(ref, rank_order_mean(world, n))) << "bucket " << bucket;
    }
    auto flat = values_for(comm->rank(), n);
    BucketReducer red(*comm, flat, bucket, ExchangeDType::kF32, "test");
    for (size_t b : order_for(comm->rank(), red.num_buckets())) {
      red.start(b);
      red.progress();
    }
    EXPECT_EQ(red.started_count(), red.num_buckets());
    red.finish();
    EXPECT_EQ(red.started_count(), 0u);
    EXPECT_TRUE(same_bits(flat, ref)) << "bucket " << bucket << " elements: max diff "
                                      << (flat - ref).abs().max().item<double>();
    // Zeros of both signs sum to zero (their signs are covered by same_bits above).
    EXPECT_EQ(flat.narrow(0, 0, 4).abs().sum().item<float>(), 0.0f);
  }
}

TEST(BucketReducer, PartialStartsThenFinishAndSeveralRounds) {
  auto comm = ht::comm::make_mpi_world();
  const int world = comm->size();
  const int64_t n = padded(5000, world);
  auto flat = values_for(comm->rank(), n);
  BucketReducer red(*comm, flat, 512, ExchangeDType::kF32, "test");
  ASSERT_GT(red.num_buckets(), 3u);
  // Round 1: only some buckets started by hand (rank-dependent), finish() starts the rest.
  for (size_t b = 0; b < red.num_buckets(); b += 2 + comm->rank()) red.start(b);
  red.finish();
  EXPECT_TRUE(same_bits(flat, ring_mean(world, n, 512)));
  // Round 2 on the result: replicas equal, so the mean changes nothing (x W / W may round: compare
  // with the same formula applied to identical inputs).
  auto before = flat.clone();
  auto expect = before.clone();
  for (int r = 1; r < world; ++r) expect = expect + before;
  expect.mul_(1.0 / world);
  red.finish();
  EXPECT_TRUE(same_bits(flat, expect));
}

TEST(BucketReducer, ProgressAloneCompletesTheExchanges) {
  auto comm = ht::comm::make_mpi_world();
  const int64_t n = padded(3000, comm->size());
  auto flat = values_for(comm->rank(), n);
  BucketReducer red(*comm, flat, 700, ExchangeDType::kF32, "test");
  for (size_t b = 0; b < red.num_buckets(); ++b) red.start(b);
  // Each rank drives progress until its own exchanges are done: every rank's messages are posted,
  // so no rank needs finish() for the others to complete.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (red.completed_count() < red.num_buckets() && std::chrono::steady_clock::now() < deadline) red.progress();
  EXPECT_EQ(red.completed_count(), red.num_buckets());
  red.finish();
  EXPECT_TRUE(same_bits(flat, ring_mean(comm->size(), n, 700)));
}

// On 2 ranks a + b == b + a: the reducer equals MPI_Allreduce's sum x 1/W, bit for bit.
TEST(BucketReducer, TwoRanksEqualParamAveragerBitwise) {
  auto comm = ht::comm::make_mpi_world();
  if (comm->size() != 2) GTEST_SKIP() << "needs exactly 2 ranks";
  const int64_t n = 8192;
  auto flat = values_for(comm->rank(), n);
  std::vector<torch::Tensor> ref{values_for(comm->rank(), n)};
  ht::comm::ParamAverager avg(*comm, ref, {});
  avg.average(ref);
  BucketReducer red(*comm, flat, 1000, ExchangeDType::kF32, "test");
  red.finish();
  EXPECT_TRUE(same_bits(flat, ref[0]));
}

// 16-bit exchange: the same formula as ParamAverager's (round, fp32 sum of rows, scale, round):
// bitwise equal on any rank count and any bucket sizes of either side.
TEST(BucketReducer, SixteenBitEqualsParamAverager) {
  auto comm = ht::comm::make_mpi_world();
  for (auto dtype : {ExchangeDType::kBF16, ExchangeDType::kF16}) {
    const int64_t n = padded(6007, comm->size());
    std::vector<torch::Tensor> ref{values_for(comm->rank(), n)};
    ht::comm::ParamAverager avg(*comm, ref, {dtype, 0, false, "ref"});
    avg.average(ref);
    auto flat = values_for(comm->rank(), n);
    BucketReducer red(*comm, flat, 1234, dtype, "test");
    for (size_t b : order_for(comm->rank(), red.num_buckets())) red.start(b);
    red.finish();
    EXPECT_TRUE(same_bits(flat, ref[0])) << ht::comm::to_string(dtype) << ": max diff "
                                         << (flat - ref[0]).abs().max().item<double>();
    EXPECT_EQ(red.bytes_per_round(), static_cast<uint64_t>(n) * 2);
  }
}

TEST(BucketReducer, RejectsBadBuffers) {
  auto comm = ht::comm::make_mpi_world();
  EXPECT_THROW(BucketReducer(*comm, torch::zeros({4}, torch::kDouble), 4, ExchangeDType::kF32, "t"), ht::Error);
  if (comm->size() > 1) {
    EXPECT_THROW(BucketReducer(*comm, torch::zeros({comm->size() * 3 + 1}), 4, ExchangeDType::kF32, "t"), ht::Error);
  }
  auto flat = torch::zeros({comm->size() * 4});
  BucketReducer red(*comm, flat, comm->size(), ExchangeDType::kF32, "t");
  red.start(0);
  EXPECT_THROW(red.start(0), ht::Error);
  red.finish();
}

// iexchange: a ring shift of tagged messages, started in rank-dependent order.
TEST(BucketReducer, IexchangeMatchesByPeerAndTag) {
  auto comm = ht::comm::make_mpi_world();
  const int world = comm->size(), me = comm->rank();
  if (world == 1) GTEST_SKIP();
  const int right = (me + 1) % world, left = (me + world - 1) % world;
  std::vector<int64_t> out{me * 10 + 1, me * 10 + 2}, in{-1, -1};
  std::vector<std::unique_ptr<ht::comm::Request>> reqs;
  auto post = [&](int k) {
    reqs.push_back(comm->iexchange({{&out[k], 8, right}}, {{&in[k], 8, left}}, 100 + k));
  };
  if (me % 2 == 0) post(0), post(1);
  else post(1), post(0);
  for (auto& r : reqs) r->wait();
  EXPECT_EQ(in[0], left * 10 + 1);
  EXPECT_EQ(in[1], left * 10 + 2);
  EXPECT_THROW(comm->iexchange({{&out[0], 8, me}}, {}, 1), ht::Error);
  EXPECT_THROW(comm->iexchange({}, {}, 24000), ht::Error);
}

}  // namespace
