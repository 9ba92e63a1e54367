// Optimizer pieces: accumulation equals one large batch, decay groups, schedule, clipping, macro-F1.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "config/config.h"
#include "model/gpt.h"
#include "train/accelerator.h"
#include "train/evaluate.h"
#include "train/optimizer/adamw.h"
#include "train/optimizer/schedule.h"

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
  auto opt = ht::train::make_optimizer(tc, ht::train::optimizer_params(*gpt));
  ASSERT_EQ(opt->param_groups().size(), 2u);
  const auto& decayed = opt->param_groups()[0];
  const auto& plain = opt->param_groups()[1];
  EXPECT_DOUBLE_EQ(static_cast<const ht::train::GroupOptions&>(decayed.options()).weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(static_cast<const ht::train::GroupOptions&>(plain.options()).weight_decay, 0.0);
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
// 20 steps of the tiny GPT's parameters with the given optimizer, on the same sequence of random
// gradients (independent of the parameters, so that only the kernels' rounding differs). The
// reference is libtorch's own optimizer with the same parameter groups.
struct OptRun {
  std::vector<torch::Tensor> params, moments;
};

std::vector<torch::Tensor> random_grads(torch::nn::Module& m, at::Generator& gen) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(torch::randn(p.sizes(), gen));
  return out;
}

OptRun ours(const ht::config::TrainConfig& tc) {
  torch::manual_seed(11);
  ht::model::Gpt gpt(tiny());
  auto opt = ht::train::make_optimizer(tc, ht::train::optimizer_params(*gpt));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (int s = 0; s < 20; ++s) {
    auto g = random_grads(*gpt, gen);
    auto params = gpt->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = g[i];
    opt->step();
  }
  OptRun r;
  for (const auto& p : gpt->parameters()) {
    r.params.push_back(p.detach().clone());
    const auto* st = opt->state_of(p);
    EXPECT_NE(st, nullptr);
    if (!st) continue;
    EXPECT_EQ(st->step, 20);
    for (const auto& m : st->moments) r.moments.push_back(m.clone());
  }
  return r;
}

// torch::optim::AdamW or SGD over the same two groups (decayed matmul weights, the rest).
OptRun reference(const ht::config::TrainConfig& tc) {
  torch::manual_seed(11);
  ht::model::Gpt gpt(tiny());
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : ht::train::optimizer_params(*gpt)) (p.decay ? decay : no_decay).push_back(p.tensor);
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (tc.optimizer == ht::config::OptimizerKind::kAdamw) {
    auto base = torch::optim::AdamWOptions(tc.lr).betas({tc.beta1, tc.beta2}).eps(tc.eps);
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(base.weight_decay(tc.weight_decay)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(base.weight_decay(0.0)));
    opt = std::make_unique<torch::optim::AdamW>(std::move(groups), base);
  } else {
    auto base = torch::optim::SGDOptions(tc.lr).momentum(tc.momentum);
    groups.emplace_back(decay, std::make_unique<torch::optim::SGDOptions>(base.weight_decay(tc.weight_decay)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::SGDOptions>(base.weight_decay(0.0)));
    opt = std::make_unique<torch::optim::SGD>(std::move(groups), base);
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (int s = 0; s < 20; ++s) {
    auto g = random_grads(*gpt, gen);
    auto params = gpt->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = g[i];
    opt->step();
  }
  OptRun r;
  for (const auto& p : gpt->parameters()) {
    r.params.push_back(p.detach().clone());
    const auto& st = *opt->state().at(p.unsafeGetTensorImpl());
    if (tc.optimizer == ht::config::OptimizerKind::kAdamw) {
      const auto& a = static_cast<const torch::optim::AdamWParamState&>(st);
      r.moments.push_back(a.exp_avg().clone());
      r.moments.push_back(a.exp_avg_sq().clone());
    } else {
      r.moments.push_back(static_cast<const torch::optim::SGDParamState&>(st).momentum_buffer().clone());
    }
  }
  return r;
}

double worst_relative(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const auto scale = a[i].abs().max().item<double>() + 1e-30;
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

void expect_bitwise(const OptRun& a, const OptRun& b, const char* what) {
  ASSERT_EQ(a.params.size(), b.params.size());
  ASSERT_EQ(a.moments.size(), b.moments.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(torch::equal(a.params[i], b.params[i])) << what << " param " << i;
  for (size_t i = 0; i < a.moments.size(); ++i)
    EXPECT_TRUE(torch::equal(a.moments[i], b.moments[i])) << what << " moment " << i;
}
}  // namespace

// plain runs torch::optim::AdamW's arithmetic op for op, foreach the same over lists: both bitwise
// equal to libtorch's AdamW. fused is one kernel with its own rounding order: within a few float
// ulp after 20 steps, parameters and moments.
TEST(Optim, AdamWKernelsAgreeWithTorchAdamW) {
  ht::config::TrainConfig tc;
  tc.lr = 1e-2;
  tc.weight_decay = 0.1;
  const OptRun ref = reference(tc);
  tc.optimizer_impl = ht::config::OptimizerImpl::kPlain;
  expect_bitwise(ours(tc), ref, "plain");
  tc.optimizer_impl = ht::config::OptimizerImpl::kForeach;
  expect_bitwise(ours(tc), ref, "foreach");
  tc.optimizer_impl = ht::config::OptimizerImpl::kFused;
  const OptRun fused = ours(tc);
  const double worst = std::max(worst_relative(ref.params, fused.params), worst_relative(ref.moments, fused.moments));
  EXPECT_LT(worst, 1e-5) << "fused AdamW drifted from plain by " << worst << " (relative to each tensor's max)";
  ht::model::Gpt gpt(tiny());
  auto opt = ht::train::make_optimizer(ht::config::TrainConfig{}, ht::train::optimizer_params(*gpt));
  EXPECT_EQ(dynamic_cast<ht::train::AdamW&>(*opt).impl(), ht::config::OptimizerImpl::kFused);  // auto
  EXPECT_EQ(opt->moment_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
}

// SGD with momentum and (coupled) weight decay: bitwise libtorch's SGD, one moment per tensor.
TEST(Optim, SgdWithMomentumEqualsTorchSgd) {
  ht::config::TrainConfig tc;
  tc.optimizer = ht::config::OptimizerKind::kSgd;
  tc.lr = 0.05;
  tc.momentum = 0.9;
  tc.weight_decay = 0.01;
  expect_bitwise(ours(tc), reference(tc), "sgd");
  ht::model::Gpt gpt(tiny());
  auto opt = ht::train::make_optimizer(tc, ht::train::optimizer_params(*gpt));
  EXPECT_EQ(opt->kind(), ht::config::OptimizerKind::kSgd);
  EXPECT_EQ(opt->moment_names(), std::vector<std::string>{"momentum_buffer"});
  EXPECT_EQ(opt->state_bytes(), 0);  // no state before the first step
}
