// The causal softmax's AVX-512 kernels (lib/model/causal_softmax.cpp) against ATen's masked fill and
// softmax and an fp64 evaluation: values, gradients, the masked future, every length, threads,
// special values, autograd.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

#include "model/causal_softmax.h"
#include "support/cpu_features.h"

using ht::model::causal_softmax;
using ht::model::causal_softmax_path;
using ht::model::CausalSoftmaxPath;

namespace {

#define REQUIRE_AVX512_PATH(x) HT_REQUIRE_AVX512_KERNEL(causal_softmax_path(x) == CausalSoftmaxPath::kAvx512, "causal_softmax")

torch::Tensor future_mask(int64_t t) { return torch::ones({t, t}, torch::kBool).triu(1); }

// What the eager attention did before the fused kernel: fill the future with -inf, softmax.
torch::Tensor aten(const torch::Tensor& x) {
  return at::softmax(x.masked_fill(future_mask(x.size(-1)), -std::numeric_limits<double>::infinity()), -1);
}

torch::Tensor reference_fp64(const torch::Tensor& x) { return aten(x.to(torch::kDouble)); }

// Scores of the spread attention sees (logits of a few units), with a length that leaves a partial
// last vector in most rows.
torch::Tensor scores(at::ScalarType dtype, int64_t t = 77) {
  torch::manual_seed(11);
  return (torch::randn({2, 3, t, t}) * 3).to(dtype);
}

double max_abs_error(const torch::Tensor& got, const torch::Tensor& ref) {
  return (got.to(torch::kDouble) - ref.to(torch::kDouble)).abs().max().item<double>();
}

// The gradient of ours, by autograd, for the upstream gradient g.
torch::Tensor grad_of_ours(const torch::Tensor& x, const torch::Tensor& g) {
  const torch::Tensor xg = x.clone().requires_grad_(true);
  causal_softmax(xg).backward(g);
  return xg.grad();
}

torch::Tensor grad_of_aten(const torch::Tensor& x, const torch::Tensor& g) {
  const torch::Tensor xg = x.clone().requires_grad_(true);
  aten(xg).backward(g);
  return xg.grad();
}

}  // namespace

TEST(CausalSoftmax, Fp32IsAsAccurateAsAten) {
  for (int64_t t : {77, 128}) {
    const torch::Tensor x = scores(torch::kFloat, t);
    REQUIRE_AVX512_PATH(x);
    const torch::Tensor ref = reference_fp64(x);
    const double ours = max_abs_error(causal_softmax(x.clone()), ref);
    const double theirs = max_abs_error(aten(x), ref);
    EXPECT_LT(ours, 1e-6) << t << " aten's error: " << theirs;
    EXPECT_LT(ours, 4 * theirs + 1e-7) << t << " aten's error: " << theirs;
  }
}

TEST(CausalSoftmax, Fp32GradientIsAsAccurateAsAten) {
  const torch::Tensor x = scores(torch::kFloat);
  REQUIRE_AVX512_PATH(x);
  const torch::Tensor g = torch::randn(x.sizes());
  const torch::Tensor y = reference_fp64(x);
  const torch::Tensor gd = g.to(torch::kDouble);
  const torch::Tensor ref = y * (gd - (gd * y).sum(-1, /*keepdim=*/true));
  const double ours = max_abs_error(grad_of_ours(x, g), ref);
  const double theirs = max_abs_error(grad_of_aten(x, g), ref);
  EXPECT_LT(ours, 2e-6) << "aten's error: " << theirs;
  EXPECT_LT(ours, 4 * theirs + 1e-7) << "aten's error: " << theirs;
}

// In bf16 the result is the fp32 computation rounded once, as ATen's: within one bf16 step of the
// fp64 value everywhere, and equal to ATen's bits nearly everywhere (the exp differs in the last
// fp32 bits, which moves a rounding now and then).
TEST(CausalSoftmax, Bf16IsTheFp32ResultRounded) {
  const torch::Tensor x = scores(torch::kBFloat16);
  REQUIRE_AVX512_PATH(x);
  const torch::Tensor y = causal_softmax(x.clone());
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  const torch::Tensor exact = reference_fp64(x);
  const torch::Tensor step = exact.abs() * std::ldexp(1.0, -8) * 1.01 + 1e-30;
  EXPECT_TRUE((y.to(torch::kDouble) - exact).abs().le(step).all().item<bool>());
  EXPECT_GT(y.eq(aten(x)).to(torch::kDouble).mean().item<double>(), 0.99);

  const torch::Tensor g = torch::randn(x.sizes()).to(torch::kBFloat16);
  const torch::Tensor ours = grad_of_ours(x, g);
  ASSERT_EQ(ours.scalar_type(), torch::kBFloat16);
  const torch::Tensor theirs = at::_softmax_backward_data(g, y, -1, torch::kBFloat16);
  EXPECT_GT(ours.eq(theirs).to(torch::kDouble).mean().item<double>(), 0.99);
  const torch::Tensor one_step = theirs.to(torch::kDouble).abs() * std::ldexp(1.0, -7) * 1.01 + 1e-30;
  EXPECT_TRUE((ours.to(torch::kDouble) - theirs.to(torch::kDouble)).abs().le(one_step).all().item<bool>());
}

// The future gets exactly 0, forward and backward; each visible row sums to 1.
TEST(CausalSoftmax, TheFutureIsZeroAndRowsSumToOne) {
  const torch::Tensor x = scores(torch::kFloat);
  REQUIRE_AVX512_PATH(x);
  const torch::Tensor future = future_mask(x.size(-1)).expand(x.sizes());
  const torch::Tensor y = causal_softmax(x.clone());
  EXPECT_TRUE(y.masked_select(future).eq(0).all().item<bool>());
  EXPECT_TRUE(y.masked_select(future.logical_not()).gt(0).all().item<bool>());
  EXPECT_LT((y.to(torch::kDouble).sum(-1) - 1).abs().max().item<double>(), 1e-6);
  const torch::Tensor gx = grad_of_ours(x, torch::randn(x.sizes()));
  EXPECT_TRUE(gx.masked_select(future).eq(0).all().item<bool>());
}

// A row's result does not depend on the row's length past its diagonal, nor on how rows are split
// among threads: every length, from one key to past a vector boundary, gives the bits of ATen's
// formula's row within fp32 rounding, and one thread gives the bits of two.
TEST(CausalSoftmax, EveryLengthAndThreadCount) {
  for (int64_t t : {1, 2, 15, 16, 17, 31, 32, 33, 100}) {
    const torch::Tensor x = scores(torch::kFloat, t);
    REQUIRE_AVX512_PATH(x);
    EXPECT_LT(max_abs_error(causal_softmax(x.clone()), reference_fp64(x)), 1e-6) << t;
  }
  const torch::Tensor big = scores(torch::kBFloat16, 256);
  const torch::Tensor g = torch::randn(big.sizes()).to(torch::kBFloat16);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const torch::Tensor one = causal_softmax(big.clone());
  const torch::Tensor one_grad = grad_of_ours(big, g);
  at::set_num_threads(2);
  const torch::Tensor two = causal_softmax(big.clone());
  const torch::Tensor two_grad = grad_of_ours(big, g);
  at::set_num_threads(threads);
  EXPECT_TRUE(one.equal(two));
  EXPECT_TRUE(one_grad.equal(two_grad));
}

// Large, equal and infinite scores behave as ATen's: no overflow (the row's max is subtracted),
// a -inf key gets 0, a NaN poisons the visible part of its row.
TEST(CausalSoftmax, SpecialValuesAsAten) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    torch::Tensor x = torch::zeros({1, 1, 20, 20});
    x[0][0][5] = 1e4;     // row 5: huge and equal
    x[0][0][6][3] = -1e4;  // row 6: one far below the rest
    x[0][0][7][2] = -inf;  // row 7: one key masked by its score
    x[0][0][8][4] = nan;   // row 8: NaN
    x[0][0][9][9] = 80;    // row 9: one key dominates
    x = x.to(dtype);
    REQUIRE_AVX512_PATH(x);
    const torch::Tensor ours = causal_softmax(x.clone()).to(torch::kFloat);
    const torch::Tensor theirs = aten(x).to(torch::kFloat);
    const torch::Tensor future = future_mask(20).expand(x.sizes());
    const torch::Tensor visible = future.logical_not();
    EXPECT_TRUE(ours.masked_select(visible).isnan().equal(theirs.masked_select(visible).isnan())) << ours << theirs;
    EXPECT_TRUE(ours[0][0][8].slice(0, 0, 9).isnan().all().item<bool>()) << ours;
    // ATen's softmax spreads the NaN over the masked future too; ours keeps the future 0.
    EXPECT_TRUE(ours.masked_select(future).eq(0).all().item<bool>()) << ours;
    const torch::Tensor ok = theirs.isnan().logical_not();
    EXPECT_TRUE(torch::allclose(ours.masked_select(ok), theirs.masked_select(ok), 1e-6, 1e-30)) << ours << theirs;
  }
}

TEST(CausalSoftmax, OtherTensorsTakeAten) {
  EXPECT_EQ(causal_softmax_path(torch::randn({2, 4, 4}, torch::kDouble)), CausalSoftmaxPath::kAten);
  EXPECT_EQ(causal_softmax_path(torch::randn({2, 4, 4}).transpose(1, 2)), CausalSoftmaxPath::kAten);
  EXPECT_EQ(causal_softmax_path(torch::randn({2, 4, 4}).to(torch::kHalf)), CausalSoftmaxPath::kAten);
  EXPECT_EQ(causal_softmax_path(torch::randn({2, 4, 5})), CausalSoftmaxPath::kAten);  // not square
  EXPECT_EQ(causal_softmax_path(torch::randn({4})), CausalSoftmaxPath::kAten);
  const torch::Tensor t = torch::randn({2, 4, 4}).transpose(1, 2);
  EXPECT_TRUE(torch::allclose(causal_softmax(t.clone()), aten(t)));
}

TEST(CausalSoftmax, SecondDerivativeThroughAten) {
  const torch::Tensor x = scores(torch::kFloat, 19).requires_grad_(true);
  REQUIRE_AVX512_PATH(x);
  const torch::Tensor w = torch::randn(x.sizes());
  const torch::Tensor g1 = torch::autograd::grad({(causal_softmax(x) * w).sum()}, {x}, {}, true, true)[0];
  const torch::Tensor g2 = torch::autograd::grad({(g1 * g1).sum()}, {x})[0];
  const torch::Tensor xa = x.detach().clone().requires_grad_(true);
  const torch::Tensor a1 = torch::autograd::grad({(aten(xa) * w).sum()}, {xa}, {}, true, true)[0];
  const torch::Tensor a2 = torch::autograd::grad({(a1 * a1).sum()}, {xa})[0];
  EXPECT_TRUE(torch::allclose(g2, a2, 1e-4, 1e-6)) << (g2 - a2).abs().max();
}
