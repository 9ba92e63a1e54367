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

// The outer step's pass: every path leaves in global and momentum what the ATen operations leave
// (each one rounded on its own: mul, add, sub), copies global into copy (also when copy is g
// itself, as the sync calls it) and returns its bit sum; with no g it is a copy. For DiLoCo's
// Nesterov and heavy-ball steps, the plain step and other learning rates; tails and a chunk's
// length included, with a signed zero, a subnormal and an infinity in the outer values. The tensor
// form (split over chunks) returns the same.
TEST(CommLocal, OuterStepEveryPathMatchesTheAtenOperations) {
  using ht::comm::OuterStepFactors;
  for (const OuterStepFactors f : {OuterStepFactors{1.0f, 0.0f, true}, OuterStepFactors{1.0f, 0.1f, true},
                                   OuterStepFactors{0.7f, 0.9f, true}, OuterStepFactors{0.7f, 0.9f, false},
                                   OuterStepFactors{0.5f, 0.0f, false}}) {
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 1000, 65536 + 5}) {
      const std::string what = "lr " + std::to_string(f.lr) + ", momentum " + std::to_string(f.momentum) +
                               (f.nesterov ? " nesterov" : "") + ", n = " + std::to_string(n);
      torch::manual_seed(n);
      auto global = torch::randn({n}) * 1e3, momentum = torch::randn({n}), g = torch::randn({n}) * 1e-2;
      if (n > 4) global[0] = -0.0f, global[1] = 1e-40f, global[2] = std::numeric_limits<float>::infinity();
      auto m_want = momentum.clone(), u = g;
      if (f.momentum != 0.0f) {
        m_want = momentum.mul(f.momentum).add(g);
        u = f.nesterov ? g.add(m_want.mul(f.momentum)) : m_want;
      }
      if (f.lr != 1.0f) u = u.mul(f.lr);
      const auto want = global.sub(u);
      const int64_t want_bits = ht::comm::sum_of_bits(want.data_ptr(), n, 4, ht::comm::BitSumPath::kScalar);
      const auto bytes = static_cast<size_t>(n) * 4;
      const auto same = [&](const torch::Tensor& a, const torch::Tensor& b) {
        return std::memcmp(a.data_ptr(), b.data_ptr(), bytes) == 0;
      };
      for (auto path : ht::comm::supported_bit_sum_paths()) {
        const std::string at = what + ", " + ht::comm::name_of(path) + " path";
        auto gl = global.clone(), m = momentum.clone(), gv = g.clone(), copy = torch::full({n}, 7.0f);
        EXPECT_EQ(ht::comm::outer_step_summing_bits(gl.data_ptr<float>(), m.data_ptr<float>(), gv.data_ptr<float>(),
                                                    copy.data_ptr<float>(), n, f, path),
                  want_bits)
            << at;
        EXPECT_TRUE(same(gl, want)) << at << ": outer values";
        EXPECT_TRUE(same(m, m_want)) << at << ": momentum";
        EXPECT_TRUE(same(copy, want)) << at << ": copy";
        EXPECT_TRUE(same(gv, g)) << at << ": g was written";
        gl = global.clone(), m = momentum.clone(), gv = g.clone();  // the copy goes over g
        ht::comm::outer_step_summing_bits(gl.data_ptr<float>(), m.data_ptr<float>(), gv.data_ptr<float>(),
                                          gv.data_ptr<float>(), n, f, path);
        EXPECT_TRUE(same(gv, want)) << at << ": copy over g";
        gl = global.clone(), copy = torch::zeros({n});
        EXPECT_EQ(ht::comm::outer_step_summing_bits(gl.data_ptr<float>(), nullptr, nullptr, copy.data_ptr<float>(), n,
                                                    f, path),
                  ht::comm::sum_of_bits(global.data_ptr(), n, 4, ht::comm::BitSumPath::kScalar))
            << at << ", no step";
        EXPECT_TRUE(same(copy, global) && same(gl, global)) << at << ": a copy without a step";
      }
      auto gl = global.clone(), m = momentum.clone(), gv = g.clone();
      int64_t bits = 0;
      ht::comm::outer_step(gl, m, gv, gv, f, &bits);
      EXPECT_EQ(bits, want_bits) << what << ", tensor form";
      EXPECT_TRUE(same(gv, want) && same(m, m_want)) << what << ", tensor form";
      EXPECT_EQ(ht::comm::checksum_of_bit_sum(want_bits, n), ht::comm::checksum({want})) << what;
    }
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
