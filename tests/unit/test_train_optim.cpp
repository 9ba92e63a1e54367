// Optimizer pieces: accumulation equals one large batch, decay groups, schedule, clipping, macro-F1.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "config/config.h"
#include "model/gpt.h"
#include "train/accelerator.h"
#include "train/evaluate.h"
#include "train/optim.h"

namespace {
ht::model::GptOptions tiny() {
  ht::model::GptOptions o;
  o.vocab_size = 50;
  o.n_layer = 2;
  o.n_head = 2;
  o.d_model = 16;
  o.max_seq_len = 8;
  return o;
}

// One SGD step (linear in the gradient, so the comparison is well conditioned; Adam's first step is
// ~lr * sign(g) and flips on gradients that are zero up to rounding) from identical weights.
std::vector<torch::Tensor> step_with_accumulation(int64_t accum, const torch::Tensor& ids, const torch::Tensor& tgt) {
  torch::manual_seed(7);
  ht::model::Gpt gpt(tiny());
  auto opt = std::make_unique<torch::optim::SGD>(gpt->parameters(), torch::optim::SGDOptions(0.5));
  ht::train::Accelerator acc(accum);
  const int64_t micro = ids.size(0) / accum;
  for (int64_t m = 0; m < accum; ++m) {
    auto scope = acc.accumulate();
    auto sl = torch::indexing::Slice(m * micro, (m + 1) * micro);
    acc.backward(ht::model::lm_loss(gpt->lm_logits(ids.index({sl})), tgt.index({sl})));
    if (acc.sync_gradients()) {
      ht::train::clip_grad_norm(*gpt, 1.0);
      opt->step();
    }
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : gpt->parameters()) out.push_back(p.detach().clone());
  return out;
}
}  // namespace

TEST(Optim, FourMicroBatchesEqualOneBatchFourTimesLarger) {
  torch::manual_seed(3);
  auto ids = torch::randint(0, 50, {8, 8}, torch::kLong);
  auto tgt = torch::randint(0, 50, {8, 8}, torch::kLong);
  auto one = step_with_accumulation(1, ids, tgt);
  auto four = step_with_accumulation(4, ids, tgt);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::allclose(one[i], four[i], 1e-5, 1e-6)) << i;
}

TEST(Optim, AccumulatedGradientsEqualLargeBatchGradients) {
  torch::manual_seed(4);
  auto ids = torch::randint(0, 50, {8, 8}, torch::kLong);
  auto tgt = torch::randint(0, 50, {8, 8}, torch::kLong);
  auto grads = [&](int64_t accum) {
    torch::manual_seed(7);
    ht::model::Gpt gpt(tiny());
    ht::train::Accelerator acc(accum);
    for (int64_t m = 0; m < accum; ++m) {
      auto scope = acc.accumulate();
      auto sl = torch::indexing::Slice(m * (8 / accum), (m + 1) * (8 / accum));
      acc.backward(ht::model::lm_loss(gpt->lm_logits(ids.index({sl})), tgt.index({sl})));
    }
    std::vector<torch::Tensor> g;
    for (const auto& p : gpt->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto a = grads(1), b = grads(4);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-7)) << i;
}

TEST(Optim, WeightDecayOnlyOnMatmulWeights) {
  ht::model::Gpt gpt(tiny());
  ht::config::TrainConfig tc;
  tc.weight_decay = 0.1;
  auto opt = ht::train::make_adamw(*gpt, tc);
  ASSERT_EQ(opt->param_groups().size(), 2u);
  const auto& decayed = opt->param_groups()[0];
  const auto& plain = opt->param_groups()[1];
  EXPECT_DOUBLE_EQ(static_cast<const torch::optim::AdamWOptions&>(decayed.options()).weight_decay(), 0.1);
  EXPECT_DOUBLE_EQ(static_cast<const torch::optim::AdamWOptions&>(plain.options()).weight_decay(), 0.0);
  for (const auto& p : decayed.params()) EXPECT_EQ(p.dim(), 2);
  // 2 blocks x (qkv, attn.proj, fc, mlp.proj) weights are decayed; embeddings, norms, biases are not.
  EXPECT_EQ(decayed.params().size(), 8u);
  EXPECT_EQ(decayed.params().size() + plain.params().size(), gpt->parameters().size());
}

TEST(Optim, ScheduleWarmupThenCosineToMin) {
  ht::config::TrainConfig tc;
  tc.lr = 1.0;
  tc.min_lr = 0.1;
  tc.warmup_steps = 10;
  tc.lr_schedule = ht::config::LrScheduleKind::kCosine;
  ht::train::LrSchedule s(tc, 110);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-12);
  EXPECT_NEAR(s.lr_at(110), 0.1, 1e-12);
  tc.lr_schedule = ht::config::LrScheduleKind::kLinear;
  ht::train::LrSchedule lin(tc, 110);
  EXPECT_NEAR(lin.lr_at(60), 0.55, 1e-12);
  EXPECT_NEAR(lin.lr_at(35), 1.0 - 0.9 * 0.25, 1e-12);
  tc.lr_schedule = ht::config::LrScheduleKind::kConstant;
  EXPECT_DOUBLE_EQ(ht::train::LrSchedule(tc, 110).lr_at(100), 1.0);
}

TEST(Optim, ClipScalesToMaxNorm) {
  auto lin = torch::nn::Linear(4, 4);
  for (auto& p : lin->parameters()) p.mutable_grad() = torch::full_like(p, 3.0);
  const double before = ht::train::clip_grad_norm(*lin, 1.0);
  EXPECT_NEAR(before, 3.0 * std::sqrt(20.0), 1e-4);
  double after = 0;
  for (auto& p : lin->parameters()) after += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-4);
}

TEST(Metrics, MacroF1HandComputed) {
  // 3 labels, confusion [true][pred]:
  //   t0: p0=2 p1=1 p2=0     class0: tp2 fp1 fn1 -> F1 = 4/6
  //   t1: p0=1 p1=3 p2=0     class1: tp3 fp1 fn1 -> F1 = 6/8
  //   t2: p0=0 p1=0 p2=0     class2: absent from truth and predictions -> left out
  const std::vector<int64_t> confusion = {2, 1, 0, 1, 3, 0, 0, 0, 0};
  EXPECT_NEAR(ht::train::macro_f1(confusion, 3), (4.0 / 6 + 6.0 / 8) / 2, 1e-12);
  // A label that is predicted but never true counts with F1 = 0.
  const std::vector<int64_t> c2 = {1, 1, 0, 0};  // t0: p0=1, p1=1 -> class0 F1 2/3; class1 tp0 fp1 -> 0
  EXPECT_NEAR(ht::train::macro_f1(c2, 2), (2.0 / 3 + 0.0) / 2, 1e-12);
}

namespace {
// 20 AdamW steps of the tiny GPT's parameters with the given kernel, on the same sequence of
// random gradients (independent of the parameters, so that only the kernels' rounding differs).
std::vector<torch::Tensor> adamw_run(ht::config::OptimizerImpl impl) {
  torch::manual_seed(11);
  ht::model::Gpt gpt(tiny());
  ht::config::TrainConfig tc;
  tc.lr = 1e-2;
  tc.weight_decay = 0.1;
  tc.optimizer_impl = impl;
  auto opt = ht::train::make_adamw(*gpt, tc);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (int s = 0; s < 20; ++s) {
    for (auto& p : gpt->parameters()) p.mutable_grad() = torch::randn(p.sizes(), gen);
    opt->step();
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : gpt->parameters()) out.push_back(p.detach().clone());
  for (const auto& p : gpt->parameters()) {
    const auto& st = static_cast<torch::optim::AdamWParamState&>(*opt->state().at(p.unsafeGetTensorImpl()));
    EXPECT_EQ(st.step(), 20);
    out.push_back(st.exp_avg().clone());
    out.push_back(st.exp_avg_sq().clone());
  }
  return out;
}
}  // namespace

// foreach runs torch::optim::AdamW's arithmetic op for op: bitwise equal. fused is one kernel with
// its own rounding order: within a few float ulp of plain after 20 steps, parameters and moments.
TEST(Optim, AdamWKernelsAgreeWithThePlainOne) {
  const auto plain = adamw_run(ht::config::OptimizerImpl::kPlain);
  const auto foreach_ = adamw_run(ht::config::OptimizerImpl::kForeach);
  const auto fused = adamw_run(ht::config::OptimizerImpl::kFused);
  ASSERT_EQ(plain.size(), fused.size());
  double worst = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain[i], foreach_[i])) << "tensor " << i;
    const auto scale = plain[i].abs().max().item<double>() + 1e-30;
    worst = std::max(worst, (plain[i] - fused[i]).abs().max().item<double>() / scale);
  }
  EXPECT_LT(worst, 1e-5) << "fused AdamW drifted from plain by " << worst << " (relative to each tensor's max)";
  EXPECT_EQ(ht::train::make_adamw(*ht::model::Gpt(tiny()), ht::config::TrainConfig{})->impl(),
            ht::config::OptimizerImpl::kFused);  // auto
}
