// Fused averaging over real MPI ranks: exact fp32 means, replicas bitwise equal, buckets, the
// staging path equal to the direct path, 16-bit exchange within its rounding bound, the
// non-blocking path, checksums that catch a perturbed rank, broadcast, alltoall/iallreduce.
#include <gtest/gtest.h>

#include "comm/agree.h"
#include "comm/communicator.h"
#include "comm/param_averager.h"
#include "core/error.h"

namespace {

using ht::comm::AveragerOptions;
using ht::comm::ExchangeDType;
using ht::comm::ParamAverager;

// Rank-dependent tensors of assorted shapes; values_for(r) is what rank r holds.
std::vector<torch::Tensor> values_for(int rank, int64_t scale = 1) {
  torch::manual_seed(1234 + rank);
  return {torch::randn({7, 5 * scale}), torch::randn({3}), torch::randn({2, 3, 4 * scale}), torch::randn({1})};
}

std::vector<torch::Tensor> exact_mean(int world, int64_t scale = 1) {
  auto acc = values_for(0, scale);
  for (auto& t : acc) t = t.to(torch::kDouble);
  for (int r = 1; r < world; ++r) {
    auto v = values_for(r, scale);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += v[i].to(torch::kDouble);
  }
  for (auto& t : acc) t /= world;
  return acc;
}

std::vector<torch::Tensor> clone_all(const std::vector<torch::Tensor>& v) {
  std::vector<torch::Tensor> out;
  for (const auto& t : v) out.push_back(t.clone());
  return out;
}

bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

std::vector<torch::Tensor> averaged(ht::comm::Communicator& comm, AveragerOptions o, int64_t scale = 1) {
  auto t = values_for(comm.rank(), scale);
  ParamAverager avg(comm, t, o);
  avg.average(t);
  return t;
}

TEST(CommAverager, Fp32MeanIsExactAndReplicasAreBitwiseEqual) {
  auto comm = ht::comm::make_mpi_world();
  auto t = averaged(*comm, {});
  auto ref = exact_mean(comm->size());
  for (size_t i = 0; i < t.size(); ++i)
    EXPECT_TRUE(torch::allclose(t[i].to(torch::kDouble), ref[i], 1e-6, 1e-6)) << "tensor " << i;
  EXPECT_NO_THROW(ht::comm::verify_replicas_equal(*comm, ht::comm::checksum(t), "test"));
}

TEST(CommAverager, AveragingIdenticalValuesLeavesThemUnchanged) {
  auto comm = ht::comm::make_mpi_world();
  auto t = values_for(0);
  auto before = clone_all(t);
  ParamAverager avg(*comm, t, {});
  avg.average(t);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(torch::allclose(t[i], before[i], 0, 1e-6));
}

// Flat parameter storage (bind): the same bits as the copying path, direct and staged, and the
// tensors stay bound across repeated averages.
TEST(CommAverager, BoundTensorsAverageBitwiseLikeTheCopyingPath) {
  auto comm = ht::comm::make_mpi_world();
  for (bool staged : {false, true}) {
    AveragerOptions o;
    o.force_staging = staged;
    auto copying = averaged(*comm, o);
    auto t = values_for(comm->rank());
    ParamAverager avg(*comm, t, o);
    ASSERT_TRUE(avg.bind(t));
    avg.average(t);
    EXPECT_TRUE(bitwise_equal(copying, t)) << "staged=" << staged;
    for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(avg.is_bound(t[i], i)) << i;
    // Second round: every rank adds its rank, the mean moves by (W-1)/2.
    { torch::NoGradGuard ng; for (auto& x : t) x.add_(static_cast<float>(comm->rank())); }
    avg.average(t);
    const float shift = static_cast<float>(comm->size() - 1) / 2;
    for (size_t i = 0; i < t.size(); ++i)
      EXPECT_TRUE(torch::allclose(t[i], copying[i] + shift, 0, 1e-5)) << "round 2, tensor " << i;
    EXPECT_NO_THROW(ht::comm::verify_replicas_equal(*comm, ht::comm::checksum(t), "bound"));
  }
}

TEST(CommAverager, BucketsGiveTheSameResultAsOneBuffer) {
  auto comm = ht::comm::make_mpi_world();
  AveragerOptions bucketed;
  bucketed.bucket_mb = 1;
  auto one = averaged(*comm, {}, 30000);  // ~1.7 M elements, ~6.6 MiB: 7 buckets of 1 MiB
  auto t = values_for(comm->rank(), 30000);
  ParamAverager avg(*comm, t, bucketed);
  EXPECT_GE(avg.num_buckets(), 6u);
  avg.average(t);
  EXPECT_TRUE(bitwise_equal(one, t));
}

TEST(CommAverager, StagingPathEqualsDirectPath) {
  auto comm = ht::comm::make_mpi_world();
  AveragerOptions staged;
  staged.force_staging = true;
  auto t = values_for(comm->rank());
  ParamAverager avg(*comm, t, staged);
  EXPECT_EQ(avg.path(), ht::comm::TransferPath::kStaged);
  avg.average(t);
  EXPECT_TRUE(bitwise_equal(averaged(*comm, {}), t));
  // and for a 16-bit exchange
  AveragerOptions bf{ExchangeDType::kBF16, 0, false, "bf16"}, bf_staged{ExchangeDType::kBF16, 0, true, "bf16s"};
  EXPECT_TRUE(bitwise_equal(averaged(*comm, bf), averaged(*comm, bf_staged)));
}

// Bound: each contribution is rounded once to 16 bits (relative u) and the fp32 mean once more,
// so |avg - exact| <= u * (max_r |x_r| + |exact|) elementwise, unit roundoff u = 2^-8 (bf16, 8-bit
// significand), 2^-11 (fp16); plus 2^-24 absolute for fp16 subnormals.
void expect_16bit_within_bound(ExchangeDType dt, double u) {
  auto comm = ht::comm::make_mpi_world();
  const int world = comm->size();
  auto t = averaged(*comm, {dt, 0, false, "16-bit"});
  auto ref = exact_mean(world);
  double max_err = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    auto max_abs = values_for(0)[i].abs().to(torch::kDouble);
    for (int r = 1; r < world; ++r) max_abs = torch::maximum(max_abs, values_for(r)[i].abs().to(torch::kDouble));
    auto err = (t[i].to(torch::kDouble) - ref[i]).abs();
    auto bound = u * (max_abs + ref[i].abs()) * 1.0001 + 6e-8;
    EXPECT_TRUE((err <= bound).all().item<bool>()) << "tensor " << i << " max err " << err.max().item<double>();
    max_err = std::max(max_err, err.max().item<double>());
  }
  EXPECT_GT(max_err, 0.0) << "a 16-bit exchange should not be exact on random data";
  EXPECT_NO_THROW(ht::comm::verify_replicas_equal(*comm, ht::comm::checksum(t), "16-bit"));
}

TEST(CommAverager, Bf16ExchangeWithinRoundingBound) { expect_16bit_within_bound(ExchangeDType::kBF16, 1.0 / 256); }
TEST(CommAverager, Fp16ExchangeWithinRoundingBound) { expect_16bit_within_bound(ExchangeDType::kF16, 1.0 / 2048); }

TEST(CommAverager, Bf16WithBucketsMatchesOneBuffer) {
  auto comm = ht::comm::make_mpi_world();
  auto one = averaged(*comm, {ExchangeDType::kBF16, 0, false, "a"}, 30000);
  auto many = averaged(*comm, {ExchangeDType::kBF16, 1, false, "b"}, 30000);
  EXPECT_TRUE(bitwise_equal(one, many));
}

TEST(CommAverager, NonBlockingMeanEqualsBlockingMean) {
  auto comm = ht::comm::make_mpi_world();
  for (auto dt : {ExchangeDType::kF32, ExchangeDType::kBF16}) {
    auto t = values_for(comm->rank());
    ParamAverager avg(*comm, t, {dt, 0, false, "nb"});
    avg.pack(t);
    avg.start_mean();
    EXPECT_TRUE(avg.pending());
    avg.test_mean();
    avg.wait_mean();
    EXPECT_FALSE(avg.pending());
    avg.unpack(t);
    EXPECT_TRUE(bitwise_equal(averaged(*comm, {dt, 0, false, "b"}), t));
  }
}

// An encoded exchange tested until done runs both halves from test_mean(): every bucket's allgather
// is started there (not left to wait_mean), and the mean is the blocking one's bits.
TEST(CommAverager, TestedEncodedMeanStartsItsAllgatherAndEqualsBlockingMean) {
  auto comm = ht::comm::make_mpi_world();
  for (auto dt : {ExchangeDType::kBF16, ExchangeDType::kI8, ExchangeDType::kI4}) {
    const ht::comm::AveragerOptions opts{dt, 1, false, "tested"};  // 1 MB buckets: several of them
    auto t = values_for(comm->rank(), 60000);
    ParamAverager avg(*comm, t, opts);
    ASSERT_GT(avg.num_buckets(), 1u);
    avg.pack(t);
    avg.start_mean();
    while (!avg.test_mean()) {
    }
    EXPECT_EQ(avg.gathers_started_by_test(), static_cast<int64_t>(avg.num_buckets())) << ht::comm::to_string(dt);
    avg.wait_mean();
    EXPECT_FALSE(avg.pending());
    avg.unpack(t);
    EXPECT_TRUE(bitwise_equal(averaged(*comm, {dt, 1, false, "b"}, 60000), t)) << ht::comm::to_string(dt);
  }
}

// The bit sum a mean hands back (fused into the 1/W pass for fp32, a separate read for encoded
// exchanges, blocking and not, direct and staged) is the checksum of the mean it left in flat(),
// and that mean is the same bits as without the sum.
TEST(CommAverager, MeanWithBitSumGivesTheChecksumOfTheMean) {
  auto comm = ht::comm::make_mpi_world();
  for (auto dt : {ExchangeDType::kF32, ExchangeDType::kI8})
    for (bool staged : {false, true})
      for (bool blocking : {true, false}) {
        auto t = values_for(comm->rank(), 3000);  // past one 64 Ki chunk of the parallel sum
        ParamAverager plain(*comm, t, {dt, 0, staged, "plain"}), summing(*comm, t, {dt, 0, staged, "summing"});
        plain.pack(t);
        plain.allreduce_mean();
        summing.pack(t);
        int64_t bits = 0;
        if (blocking) {
          summing.allreduce_mean(&bits);
        } else {
          summing.start_mean();
          summing.wait_mean(&bits);
        }
        const std::string what = fmt::format("{} {} {}", ht::comm::to_string(dt), staged ? "staged" : "direct",
                                             blocking ? "blocking" : "non-blocking");
        EXPECT_TRUE(torch::equal(plain.flat(), summing.flat())) << what;
        EXPECT_EQ(ht::comm::checksum_of_bit_sum(bits, summing.flat().numel()), ht::comm::checksum({summing.flat()}))
            << what;
      }
}

TEST(CommAverager, ChecksumMismatchOnOneRankIsDetectedEverywhere) {
  auto comm = ht::comm::make_mpi_world();
  auto t = values_for(0);
  if (comm->rank() == 1) t[2].view({-1})[5] += 1e-3f;
  try {
    ht::comm::verify_replicas_equal(*comm, ht::comm::checksum(t), "perturbed");
    FAIL() << "mismatch not detected";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

// The check and the sum share one allgather: the sum is every rank's addend on every rank, and a
// rank whose value differs is named on every rank, whichever rank it is.
TEST(CommAverager, AgreementCarriesASumAndNamesTheDifferingRank) {
  auto comm = ht::comm::make_mpi_world();
  const int w = comm->size();
  const double addend = 0.5 + comm->rank();  // exact in binary: the sum must be exact too
  const double sum = ht::comm::require_agreement_summing(*comm, 42, addend, ht::ExitCode::kData, "equal");
  EXPECT_EQ(sum, 0.5 * w + w * (w - 1) / 2.0);
  for (int odd = 1; odd < w; ++odd) {
    try {
      ht::comm::require_agreement_summing(*comm, comm->rank() == odd ? 7 : 42, addend, ht::ExitCode::kData, "one off");
      FAIL() << "rank " << odd << "'s value not detected";
    } catch (const ht::Error& e) {
      EXPECT_EQ(e.code(), ht::ExitCode::kData);
      EXPECT_NE(std::string(e.what()).find(fmt::format("one off: rank 0 has 000000000000002a, differing: rank {} (0000000000000007)", odd)),
                std::string::npos) << e.what();
    }
  }
}

TEST(CommAverager, ChecksumSeesASingleFlippedBit) {
  auto t = values_for(0);
  const auto before = ht::comm::checksum(t);
  auto bits = t[0].view(torch::kInt);
  bits.view({-1})[3].bitwise_xor_(1);
  EXPECT_NE(before, ht::comm::checksum(t));
}

TEST(CommAverager, BroadcastTensorsCopiesRootEverywhere) {
  auto comm = ht::comm::make_mpi_world();
  auto t = values_for(comm->rank());
  ht::comm::broadcast_tensors(*comm, t, 0);
  EXPECT_TRUE(bitwise_equal(t, values_for(0)));
}

TEST(CommCommunicator, AlltoallAndIallreduce) {
  auto comm = ht::comm::make_mpi_world();
  const int w = comm->size(), r = comm->rank();
  std::vector<int32_t> send(static_cast<size_t>(w)), recv(static_cast<size_t>(w), -1);
  for (int j = 0; j < w; ++j) send[static_cast<size_t>(j)] = 100 * r + j;
  comm->alltoall(send.data(), recv.data(), sizeof(int32_t));
  for (int j = 0; j < w; ++j) EXPECT_EQ(recv[static_cast<size_t>(j)], 100 * j + r);
  std::vector<double> v(5, r + 1.0);
  auto req = comm->iallreduce(v.data(), v.size(), ht::comm::DType::kF64, ht::comm::ReduceOp::kSum);
  req->wait();
  EXPECT_TRUE(req->test());
  for (double x : v) EXPECT_EQ(x, w * (w + 1) / 2.0);
}

// Point-to-point to and from rank 0 (the checkpoint gather/scatter): each rank's own payload
// arrives intact and in rank order; sending to oneself is an error, not a hang.
TEST(CommCommunicator, SendRecvToAndFromRankZero) {
  auto comm = ht::comm::make_mpi_world();
  const int w = comm->size(), r = comm->rank();
  auto payload = [](int rank) {
    std::vector<float> v(10000 + static_cast<size_t>(rank));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(rank * 1000003 + static_cast<int>(i));
    return v;
  };
  if (r == 0) {
    for (int src = 1; src < w; ++src) {
      EXPECT_EQ(comm->recv_string(src), "rank " + std::to_string(src));
      auto want = payload(src);
      std::vector<float> got(want.size(), -1.0f);
      comm->recv(got.data(), got.size() * sizeof(float), src);
      EXPECT_EQ(got, want) << "from rank " << src;
    }
    for (int dst = 1; dst < w; ++dst) comm->send_string(std::string(static_cast<size_t>(dst) * 3, 'x'), dst);
    EXPECT_THROW(comm->send(&w, sizeof(w), 0), ht::Error);
  } else {
    comm->send_string("rank " + std::to_string(r), 0);
    auto mine = payload(r);
    comm->send(mine.data(), mine.size() * sizeof(float), 0);
    EXPECT_EQ(comm->recv_string(0), std::string(static_cast<size_t>(r) * 3, 'x'));
  }
}

TEST(CommAverager, LayoutMismatchIsAnError) {
  auto comm = ht::comm::make_mpi_world();
  auto t = values_for(comm->rank());
  ParamAverager avg(*comm, t, {});
  auto other = values_for(comm->rank(), 2);
  EXPECT_THROW(avg.pack(other), ht::Error);
}

}  // namespace
