// The tanh GELU's vector kernels (lib/model/gelu.cpp: AVX-512 and AVX2, each where the CPU has it)
// against ATen's gelu / gelu_backward and an fp64 evaluation of the formula: values, gradients,
// special values, tails, threads, autograd.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/gelu.h"
#include "support/cpu_features.h"

using ht::model::gelu_path;
using ht::model::gelu_path_name;
using ht::model::gelu_paths;
using ht::model::gelu_tanh;
using ht::model::gelu_tanh_via;
using ht::model::GeluPath;

namespace {

#define REQUIRE_AVX512_PATH(x) HT_REQUIRE_AVX512_KERNEL(gelu_path(x) == GeluPath::kAvx512, "gelu_tanh")

// The vector paths an fp32 tensor takes on this CPU, checked against /proc/cpuinfo so that a test over
// them never compares ATen with itself: AVX-512 where the CPU has avx512f/bw/vl/bf16, AVX2 where it has
// avx2 and fma. Empty (and the caller skips) on a CPU with neither.
std::vector<GeluPath> fp32_vector_paths(const torch::Tensor& x) {
  std::vector<GeluPath> out;
  for (GeluPath p : gelu_paths(x))
    if (p != GeluPath::kAten) out.push_back(p);
  const auto has = [&](GeluPath p) { return std::find(out.begin(), out.end(), p) != out.end(); };
  EXPECT_EQ(has(GeluPath::kAvx512), ht::test::cpu_runs_avx512_kernels());
  EXPECT_EQ(has(GeluPath::kAvx2), ht::test::cpuinfo_has("avx2") && ht::test::cpuinfo_has("fma"));
  return out;
}

#define FOR_EACH_FP32_PATH(x, path)                                                             \
  const std::vector<GeluPath> paths_of_x = fp32_vector_paths(x);                                \
  if (paths_of_x.empty()) GTEST_SKIP() << "this CPU has neither AVX-512 with bf16 nor AVX2 + FMA"; \
  for (GeluPath path : paths_of_x)

// In fp64 through 0.5 (1 + tanh(u)) = sigmoid(2u): the tanh form cancels even in fp64 where
// tanh(u) is near -1 (x < -6: results below 1e-14 with relative errors of per cent).
torch::Tensor sigmoid_2u(const torch::Tensor& d, double sign = 1.0) {
  return torch::sigmoid(sign * 2 * std::sqrt(2.0 / M_PI) * (d + 0.044715 * d.pow(3)));
}

torch::Tensor reference_fp64(const torch::Tensor& x) {
  const torch::Tensor d = x.to(torch::kDouble);
  return d * sigmoid_2u(d);
}

torch::Tensor reference_grad_fp64(const torch::Tensor& x) {
  const torch::Tensor d = x.to(torch::kDouble);
  const torch::Tensor du2 = 2 * std::sqrt(2.0 / M_PI) * (1 + 3 * 0.044715 * d * d);
  return sigmoid_2u(d) + d * sigmoid_2u(d) * sigmoid_2u(d, -1.0) * du2;
}

// Inputs across the range a GELU sees, with a length that leaves a partial last vector.
torch::Tensor inputs(at::ScalarType dtype, int64_t n = 100003) {
  torch::manual_seed(7);
  return (torch::randn({n}) * 4).to(dtype);
}

// Max error relative to max(|ref|, 1): the absolute error where values are small, relative above.
double max_scaled_error(const torch::Tensor& got, const torch::Tensor& ref) {
  const torch::Tensor r = ref.to(torch::kDouble);
  return ((got.to(torch::kDouble) - r).abs() / r.abs().clamp_min(1.0)).max().item<double>();
}

}  // namespace

TEST(GeluTanh, Fp32IsAsAccurateAsAten) {
  const torch::Tensor x = inputs(torch::kFloat);
  const torch::Tensor ref = reference_fp64(x);
  const double aten = max_scaled_error(torch::gelu(x, "tanh"), ref);
  FOR_EACH_FP32_PATH(x, path) {
    const double ours = max_scaled_error(gelu_tanh_via(x, path), ref);
    EXPECT_LT(ours, 1e-6) << gelu_path_name(path) << "; aten's error: " << aten;
    EXPECT_LT(ours, 4 * aten + 1e-7) << gelu_path_name(path) << "; aten's error: " << aten;
  }
}

TEST(GeluTanh, Fp32GradientIsAsAccurateAsAten) {
  const torch::Tensor x = inputs(torch::kFloat).requires_grad_(true);
  const torch::Tensor g = torch::randn(x.sizes());
  const torch::Tensor ref = g.to(torch::kDouble) * reference_grad_fp64(x.detach());
  const double aten = max_scaled_error(at::gelu_backward(g, x.detach(), "tanh"), ref);
  FOR_EACH_FP32_PATH(x, path) {
    x.mutable_grad() = torch::Tensor();
    gelu_tanh_via(x, path).backward(g);
    const double ours = max_scaled_error(x.grad(), ref);
    EXPECT_LT(ours, 2e-6) << gelu_path_name(path) << "; aten's error: " << aten;
    EXPECT_LT(ours, 4 * aten + 1e-7) << gelu_path_name(path) << "; aten's error: " << aten;
  }
}

// In bf16 the result is the fp32 computation rounded once. Ours is the fp64 value correctly rounded
// nearly everywhere and within one bf16 step of it everywhere; ATen's 0.5 x (1 + tanh(u)) cancels in
// the negative tail (x < -4: tiny results carrying an absolute error of ~1e-7) and matches the
// rounded fp64 value in only ~86 % of these inputs, so it is the weaker reference here.
TEST(GeluTanh, Bf16IsTheFp64ValueRounded) {
  const torch::Tensor x = inputs(torch::kBFloat16).requires_grad_(true);
  REQUIRE_AVX512_PATH(x);
  const torch::Tensor g = torch::randn(x.sizes()).to(torch::kBFloat16);
  const torch::Tensor y = gelu_tanh(x);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  y.backward(g);
  const torch::Tensor xd = x.detach();
  const std::pair<torch::Tensor, torch::Tensor> pairs[] = {
      {y.detach(), reference_fp64(xd)}, {x.grad(), g.to(torch::kDouble) * reference_grad_fp64(xd)}};
  for (const auto& [ours, exact] : pairs) {
    const torch::Tensor rounded = exact.to(torch::kBFloat16);
    EXPECT_GT(ours.eq(rounded).to(torch::kDouble).mean().item<double>(), 0.99);
    const torch::Tensor step = exact.abs().clamp_min(1e-30) * std::ldexp(1.0, -7);
    EXPECT_TRUE((ours.to(torch::kDouble) - exact).abs().le(step * 1.01).all().item<bool>());
  }
  const double aten_rounded = torch::gelu(xd, "tanh").eq(reference_fp64(xd).to(torch::kBFloat16)).to(torch::kDouble)
                                  .mean().item<double>();
  EXPECT_LT(aten_rounded, 0.99) << "ATen's bf16 GELU is now as exact as ours: revisit the comment above";
}

// Zeros, tiny and huge values, infinities and NaN: as ATen's, through every vector path (the AVX2
// exp builds 2^n in two factors where AVX-512 has scalef: the over- and underflow ends are checked here).
void expect_special_values_as_aten(const torch::Tensor& x, GeluPath path) {
  const torch::Tensor ours = gelu_tanh_via(x, path).to(torch::kFloat);
  const torch::Tensor aten = torch::gelu(x, "tanh").to(torch::kFloat);
  EXPECT_TRUE(ours.isnan().equal(aten.isnan())) << gelu_path_name(path) << ours << aten;
  const torch::Tensor finite = aten.isfinite();
  EXPECT_TRUE(ours.isinf().equal(aten.isinf())) << gelu_path_name(path) << ours << aten;
  EXPECT_TRUE(torch::allclose(ours.index({finite}), aten.index({finite}), 1e-6, 1e-30))
      << gelu_path_name(path) << ours << aten;
}

torch::Tensor special_values(at::ScalarType dtype) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return torch::tensor({0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, 30.0f, -30.0f, 1e4f, -1e4f, inf, -inf, nan}).to(dtype);
}

TEST(GeluTanh, SpecialValuesAsAten) {
  const torch::Tensor x = special_values(torch::kFloat);
  FOR_EACH_FP32_PATH(x, path) expect_special_values_as_aten(x, path);
}

TEST(GeluTanh, Bf16SpecialValuesAsAten) {
  const torch::Tensor x = special_values(torch::kBFloat16);
  REQUIRE_AVX512_PATH(x);
  expect_special_values_as_aten(x, GeluPath::kAvx512);
}

TEST(GeluTanh, EveryLengthAndThreadCountGivesTheSameBits) {
  const torch::Tensor big = inputs(torch::kFloat, 1 << 20);
  FOR_EACH_FP32_PATH(big, path) {
    // Each element's result does not depend on where it sits: a prefix of any length, a tail of any
    // size, equals the same elements of the whole.
    const torch::Tensor whole = gelu_tanh_via(big, path);
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 1000})
      EXPECT_TRUE(gelu_tanh_via(big.narrow(0, 0, n).clone(), path).equal(whole.narrow(0, 0, n)))
          << gelu_path_name(path) << " " << n;
    const int threads = at::get_num_threads();
    at::set_num_threads(2);
    const torch::Tensor two = gelu_tanh_via(big, path);
    at::set_num_threads(threads);
    EXPECT_TRUE(two.equal(whole)) << gelu_path_name(path);
  }
}

// The two vector paths do the same arithmetic in the same order: the same bits, forward and backward,
// wherever the result is a normal float (scalef and the AVX2 exp's two factors round only subnormals).
TEST(GeluTanh, Avx512AndAvx2GiveTheSameBits) {
  const torch::Tensor x = inputs(torch::kFloat, 1 << 16).requires_grad_(true);
  const std::vector<GeluPath> paths = fp32_vector_paths(x);
  if (paths.size() < 2) GTEST_SKIP() << "needs a CPU with both AVX-512 with bf16 and AVX2";
  const torch::Tensor g = torch::randn(x.sizes());
  std::vector<std::pair<torch::Tensor, torch::Tensor>> results;
  for (GeluPath path : paths) {
    x.mutable_grad() = torch::Tensor();
    const torch::Tensor y = gelu_tanh_via(x, path);
    y.backward(g);
    results.emplace_back(y.detach(), x.grad().clone());
  }
  const float tiny = std::numeric_limits<float>::min();
  for (const auto& [a, b] : {std::pair{results[0].first, results[1].first}, {results[0].second, results[1].second}}) {
    const torch::Tensor normal = a.abs().ge(tiny) & b.abs().ge(tiny);
    EXPECT_GT(normal.sum().item<int64_t>(), x.numel() / 2);
    EXPECT_TRUE(a.index({normal}).equal(b.index({normal})));
  }
}

TEST(GeluTanh, OtherTensorsTakeAten) {
  EXPECT_EQ(gelu_path(torch::randn({4, 4}, torch::kDouble)), GeluPath::kAten);
  // bf16 only where the CPU converts to it natively: AVX2 has no bf16 arithmetic.
  const torch::Tensor b = torch::randn({4, 4}).to(torch::kBFloat16);
  EXPECT_EQ(gelu_path(b), ht::test::cpu_runs_avx512_kernels() ? GeluPath::kAvx512 : GeluPath::kAten);
  const auto b_paths = gelu_paths(b);
  EXPECT_EQ(std::count(b_paths.begin(), b_paths.end(), GeluPath::kAvx2), 0);
  // A path the tensor does not admit is refused, not run.
  EXPECT_THROW(gelu_tanh_via(torch::randn({4, 4}, torch::kDouble), GeluPath::kAvx2), std::runtime_error);
  EXPECT_EQ(gelu_path(torch::randn({4, 4}).t()), GeluPath::kAten);  // not contiguous
  EXPECT_EQ(gelu_path(torch::randn({4, 4}).to(torch::kHalf)), GeluPath::kAten);
  const torch::Tensor t = torch::randn({4, 4}).t();
  EXPECT_TRUE(torch::allclose(gelu_tanh(t), torch::gelu(t, "tanh")));
}

TEST(GeluTanh, SecondDerivativeThroughAten) {
  const torch::Tensor x = inputs(torch::kFloat, 1001).requires_grad_(true);
  const torch::Tensor xa = x.detach().clone().requires_grad_(true);
  const torch::Tensor a1 = torch::autograd::grad({torch::gelu(xa, "tanh").sum()}, {xa}, {}, true, true)[0];
  const torch::Tensor a2 = torch::autograd::grad({a1.sum()}, {xa})[0];
  FOR_EACH_FP32_PATH(x, path) {
    const torch::Tensor g1 = torch::autograd::grad({gelu_tanh_via(x, path).sum()}, {x}, {}, true, true)[0];
    const torch::Tensor g2 = torch::autograd::grad({g1.sum()}, {x})[0];
    EXPECT_TRUE(torch::allclose(g2, a2, 1e-5, 1e-6)) << gelu_path_name(path);
  }
}
