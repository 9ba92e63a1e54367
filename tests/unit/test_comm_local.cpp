// The single-process communicator: averaging is the identity, the staging path is too, and the
// pieces (pack/unpack, checksum, exchange-dtype parsing) behave without MPI.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "comm/bit_sum.h"
#include "comm/communicator.h"
#include "comm/param_averager.h"
#include "core/error.h"

namespace {

std::vector<torch::Tensor> sample() {
  torch::manual_seed(7);
  return {torch::randn({4, 3}), torch::randn({5}), torch::randn({2, 2, 2})};
}

TEST(CommLocal, AverageOnOneRankIsIdentityOnEveryPath) {
  auto comm = ht::comm::make_local();
  for (bool staged : {false, true})
    for (auto dt : {ht::comm::ExchangeDType::kF32, ht::comm::ExchangeDType::kBF16}) {
      auto t = sample();
      ht::comm::ParamAverager avg(*comm, t, {dt, 0, staged, "local"});
      EXPECT_EQ(avg.path(), staged ? ht::comm::TransferPath::kStaged : ht::comm::TransferPath::kHostDirect);
      avg.average(t);
      auto ref = sample();
      for (size_t i = 0; i < t.size(); ++i) {
        if (dt == ht::comm::ExchangeDType::kF32)
          EXPECT_TRUE(torch::equal(t[i], ref[i]));
        else  // one rounding to bf16
          EXPECT_TRUE(torch::allclose(t[i], ref[i], 1.0 / 256, 0));
      }
    }
}

TEST(CommLocal, PackUnpackRoundTripAndAddMode) {
  auto comm = ht::comm::make_local();
  auto t = sample();
  ht::comm::ParamAverager avg(*comm, t, {});
  EXPECT_EQ(avg.numel(), 12 + 5 + 8);
  EXPECT_EQ(avg.bytes_per_call(), 25u * 4);
  avg.pack(t);
  auto zeros = std::vector<torch::Tensor>{torch::zeros({4, 3}), torch::zeros({5}), torch::zeros({2, 2, 2})};
  avg.unpack(zeros);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(torch::equal(zeros[i], t[i]));
  avg.unpack(zeros, {}, /*add=*/true);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(torch::equal(zeros[i], 2 * t[i]));
}

TEST(CommLocal, BindMovesTensorsIntoTheFlatBufferKeepingValuesAndHandles) {
  auto comm = ht::comm::make_local();
  auto t = sample();
  for (auto& x : t) x.set_requires_grad(true);  // parameters: leaf variables
  const auto* impl0 = t[0].unsafeGetTensorImpl();
  auto ref = sample();
  ht::comm::ParamAverager avg(*comm, t, {});
  ASSERT_TRUE(avg.bind(t));
  EXPECT_EQ(t[0].unsafeGetTensorImpl(), impl0);  // same handle (optimizer state keyed by it survives)
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_TRUE(avg.is_bound(t[i], i)) << i;
    EXPECT_TRUE(torch::equal(t[i], ref[i])) << i;
    EXPECT_EQ(t[i].sizes(), ref[i].sizes());
    EXPECT_TRUE(t[i].requires_grad());
  }
  // Writing a tensor writes the buffer, and the other way round.
  { torch::NoGradGuard ng; t[1].fill_(3.0f); }
  EXPECT_TRUE(torch::equal(avg.slice(avg.flat(), 1), torch::full({5}, 3.0f)));
  avg.flat().narrow(0, 0, 12).fill_(-1.0f);
  EXPECT_TRUE(torch::equal(t[0], torch::full({4, 3}, -1.0f)));
  // Gradients still flow to the bound tensors.
  (t[0] * t[0]).sum().backward();
  EXPECT_TRUE(torch::equal(t[0].grad(), torch::full({4, 3}, -2.0f)));
}

TEST(CommLocal, BindRefusesNonFp32AndAReplacedTensorFallsBackToCopying) {
  auto comm = ht::comm::make_local();
  std::vector<torch::Tensor> mixed{torch::randn({3}), torch::randn({2}, torch::kDouble)};
  ht::comm::ParamAverager m(*comm, mixed, {});
  EXPECT_FALSE(m.bind(mixed));
  EXPECT_FALSE(m.is_bound(mixed[0], 0));

  auto t = sample();
  ht::comm::ParamAverager avg(*comm, t, {});
  ASSERT_TRUE(avg.bind(t));
  t[2].set_data(torch::full({2, 2, 2}, 5.0f));  // storage replaced behind the averager's back
  EXPECT_FALSE(avg.is_bound(t[2], 2));
  avg.average(t);  // must pack the replaced tensor instead of averaging stale buffer contents
  EXPECT_TRUE(torch::equal(t[2], torch::full({2, 2, 2}, 5.0f)));
  EXPECT_TRUE(torch::equal(t[0], sample()[0]));
}

TEST(CommLocal, BucketCountFollowsBucketMb) {
  auto comm = ht::comm::make_local();
  std::vector<torch::Tensor> big{torch::zeros({3 * (1 << 20) / 4 + 10})};  // 3 MiB + 40 bytes of fp32
  ht::comm::ParamAverager one(*comm, big, {});
  ht::comm::ParamAverager four(*comm, big, {ht::comm::ExchangeDType::kF32, 1, false, "b"});
  EXPECT_EQ(one.num_buckets(), 1u);
  EXPECT_EQ(four.num_buckets(), 4u);
}

TEST(CommLocal, ChecksumDependsOnValuesAndOrder) {
  auto a = sample();
  auto b = sample();
  EXPECT_EQ(ht::comm::checksum(a), ht::comm::checksum(b));
  std::swap(b[0], b[2]);
  EXPECT_NE(ht::comm::checksum(a), ht::comm::checksum(b));
  auto c = sample();
  c[1][0] += 1e-6f;
  EXPECT_NE(ht::comm::checksum(a), ht::comm::checksum(c));
}

// Every vector path sums exactly what a plain loop sums, at every width, for lengths around the
// vector widths (the tails) and past a 64 Ki chunk, with the extremes of each width included.
template <typename Int>
void expect_every_path_matches_a_plain_loop() {
  std::mt19937_64 rng(11);
  for (int64_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 65, 1000, 65536 + 5}) {
    std::vector<Int> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<Int>(rng());
    if (n > 2) v[0] = std::numeric_limits<Int>::min(), v[1] = std::numeric_limits<Int>::max();
    uint64_t sum = 0;  // wrap-around, as the 64-bit widths overflow
    for (Int x : v) sum += static_cast<uint64_t>(static_cast<int64_t>(x));
    const auto expected = static_cast<int64_t>(sum);
    for (auto path : ht::comm::supported_bit_sum_paths())
      EXPECT_EQ(ht::comm::sum_of_bits(v.data(), n, sizeof(Int), path), expected)
          << ht::comm::name_of(path) << " path, " << sizeof(Int) << "-byte elements, n = " << n;
  }
}

// Every path of the fused 1/W pass stores what libtorch's mul_ stores and returns the bit sum of
// it, tails and a chunk's length included, with signed zeros, subnormals and infinities in the data.
TEST(CommLocal, ScaleSummingBitsEveryPathMatchesMulThenSum) {
  for (float scale : {0.5f, 1.0f / 3.0f, 0.125f}) {
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 1000, 65536 + 5}) {
      torch::manual_seed(n);
      auto data = torch::randn({n}) * 1e3;
      if (n > 4) {
        data[0] = -0.0f, data[1] = 1e-40f, data[2] = std::numeric_limits<float>::infinity();
        data[3] = -std::numeric_limits<float>::min();
      }
      auto expected = data.mul(scale);
      const int64_t expected_bits = ht::comm::sum_of_bits(expected.data_ptr(), n, 4, ht::comm::BitSumPath::kScalar);
      for (auto path : ht::comm::supported_bit_sum_paths()) {
        auto out = data.clone();
        const int64_t bits = ht::comm::scale_summing_bits(out.data_ptr<float>(), n, scale, path);
        EXPECT_EQ(bits, expected_bits) << ht::comm::name_of(path) << " path, n = " << n << ", scale " << scale;
        EXPECT_EQ(std::memcmp(out.data_ptr(), expected.data_ptr(), static_cast<size_t>(n) * 4), 0)
            << ht::comm::name_of(path) << " path stores other values, n = " << n << ", scale " << scale;
      }
    }
  }
}

// The outer step's fused pass: every path leaves in target what libtorch's sub_ leaves, copies it
// into dst (also when dst is the delta itself, as the sync calls it) and returns its bit sum; with
// no delta it is a copy. The tensor form, split over chunks, returns the same.
TEST(CommLocal, SubtractCopySummingBitsEveryPathMatchesSubThenCopy) {
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 1000, 65536 + 5}) {
    torch::manual_seed(n);
    auto target = torch::randn({n}) * 1e3, delta = torch::randn({n}) * 1e-2;
    if (n > 4) {
      target[0] = -0.0f, target[1] = 1e-40f, target[2] = std::numeric_limits<float>::infinity();
      delta[3] = target[3].item<float>();  // an exact zero difference
    }
    auto expected = target.sub(delta);
    const int64_t expected_bits = ht::comm::sum_of_bits(expected.data_ptr(), n, 4, ht::comm::BitSumPath::kScalar);
    const int64_t copy_bits = ht::comm::sum_of_bits(target.data_ptr(), n, 4, ht::comm::BitSumPath::kScalar);
    const auto bytes = static_cast<size_t>(n) * 4;
    for (auto path : ht::comm::supported_bit_sum_paths()) {
      const std::string what = std::string(ht::comm::name_of(path)) + " path, n = " + std::to_string(n);
      auto t = target.clone(), d = delta.clone(), out = torch::full({n}, 7.0f);
      EXPECT_EQ(ht::comm::subtract_copy_summing_bits(t.data_ptr<float>(), d.data_ptr<float>(), out.data_ptr<float>(),
                                                     n, path),
                expected_bits)
          << what;
      EXPECT_EQ(std::memcmp(t.data_ptr(), expected.data_ptr(), bytes), 0) << what << ": target";
      EXPECT_EQ(std::memcmp(out.data_ptr(), expected.data_ptr(), bytes), 0) << what << ": copy";
      EXPECT_EQ(std::memcmp(d.data_ptr(), delta.data_ptr(), bytes), 0) << what << ": the delta was written";
      t = target.clone(), d = delta.clone();  // the delta is the destination
      ht::comm::subtract_copy_summing_bits(t.data_ptr<float>(), d.data_ptr<float>(), d.data_ptr<float>(), n, path);
      EXPECT_EQ(std::memcmp(d.data_ptr(), expected.data_ptr(), bytes), 0) << what << ": copy over the delta";
      t = target.clone(), out = torch::zeros({n});
      EXPECT_EQ(ht::comm::subtract_copy_summing_bits(t.data_ptr<float>(), nullptr, out.data_ptr<float>(), n, path),
                copy_bits)
          << what << ", no delta";
      EXPECT_EQ(std::memcmp(out.data_ptr(), target.data_ptr(), bytes), 0) << what << ": plain copy";
    }
    auto t = target.clone(), d = delta.clone();
    EXPECT_EQ(ht::comm::subtract_copy_summing_bits(t, d, d), expected_bits) << "tensor form, n = " << n;
    EXPECT_EQ(std::memcmp(d.data_ptr(), expected.data_ptr(), bytes), 0) << "tensor form, n = " << n;
    EXPECT_EQ(ht::comm::checksum_of_bit_sum(expected_bits, n), ht::comm::checksum({expected}));
  }
}

TEST(CommLocal, BitSumEveryPathMatchesAPlainLoop) {
  expect_every_path_matches_a_plain_loop<int8_t>();
  expect_every_path_matches_a_plain_loop<int16_t>();
  expect_every_path_matches_a_plain_loop<int32_t>();
  expect_every_path_matches_a_plain_loop<int64_t>();
  std::printf("bit-sum paths on this CPU:");
  for (auto path : ht::comm::supported_bit_sum_paths()) std::printf(" %s", ht::comm::name_of(path));
  std::printf("\n");
}

}  // namespace
