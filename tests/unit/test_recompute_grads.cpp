// Bitwise gradient equality of every recompute policy with the store-everything model (CPU,
// dropout on, 1 and 4 micro-batches), the negative control without RNG replay, the RNG stream
// after backward, a first block whose input needs no grad, torch::autograd::grad, and autocast.
#include <ATen/autocast_mode.h>

#include "recompute_fixture.h"

namespace ht::recompute::testing {
namespace {

struct PolicyCase {
  std::string name;
  config::RecomputeConfig cfg;
  int micro;
  Options opts = {};
};

class RecomputeGrads : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(RecomputeGrads, BitwiseEqualToStoringEverything) {
  const auto& pc = GetParam();
  auto ref = make_model(tiny_options());
  auto rec = make_model(tiny_options());
  apply(rec, pc.cfg, pc.opts);
  const double loss_ref = accumulate_grads(ref, pc.micro);
  const auto rng_after_ref = at::globalContext().defaultGenerator(c10::kCPU).get_state();
  const double loss_rec = accumulate_grads(rec, pc.micro);
  const auto rng_after_rec = at::globalContext().defaultGenerator(c10::kCPU).get_state();
  EXPECT_EQ(loss_ref, loss_rec);
  EXPECT_TRUE(torch::equal(rng_after_ref, rng_after_rec)) << "global RNG stream differs after backward";
  auto bad = differing_grads(ref, rec);
  EXPECT_TRUE(bad.empty()) << bad.size() << " gradients differ, first: " << (bad.empty() ? "" : bad[0]);
  EXPECT_EQ(live_saved_states(), 0);
}

std::vector<PolicyCase> all_cases() {
  std::vector<PolicyCase> v;
  for (int micro : {1, 4}) {
    v.push_back({"full", policy("full"), micro});
    v.push_back({"every_k2", policy("every_k", 2), micro});
    v.push_back({"every_k3", policy("every_k", 3), micro});
    v.push_back({"first_n3", policy("every_k", 1, 3), micro});
    v.push_back({"selective", policy("selective"), micro});
    Options keep_attn;
    keep_attn.recompute_attention_core = false;
    v.push_back({"selective_keep_attn", policy("selective"), micro, keep_attn});
    v.push_back({"none", policy("none"), micro});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Policies, RecomputeGrads, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name + "_micro" + std::to_string(info.param.micro); });

// Negative control: without RNG replay the recompute draws other dropout masks, so the
// gradients must differ; this proves the equality above is not vacuous.
TEST(RecomputeGradsControl, WithoutRngReplayGradientsDiffer) {
  for (const char* name : {"full", "selective"}) {
    auto ref = make_model(tiny_options());
    auto rec = make_model(tiny_options());
    Options no_replay;
    no_replay.replay_rng = false;
    apply(rec, policy(name), no_replay);
    accumulate_grads(ref, 1);
    accumulate_grads(rec, 1);
    EXPECT_FALSE(differing_grads(ref, rec).empty()) << name;
  }
}

TEST(RecomputeGradsControl, WithoutDropoutNoReplayIsNeeded) {
  auto ref = make_model(tiny_options(0.0));
  auto rec = make_model(tiny_options(0.0));
  Options no_replay;
  no_replay.replay_rng = false;
  apply(rec, policy("full"), no_replay);
  accumulate_grads(ref, 1);
  accumulate_grads(rec, 1);
  EXPECT_TRUE(differing_grads(ref, rec).empty());
}

// The first block's input does not require grad when the embeddings are frozen.
TEST(RecomputeGradsEdge, InputWithoutGrad) {
  for (const char* name : {"full", "selective"}) {
    auto ref = make_model(tiny_options());
    auto rec = make_model(tiny_options());
    for (auto* m : {&ref, &rec}) {
      (*m)->wte->weight.requires_grad_(false);
      (*m)->wpe->weight.requires_grad_(false);
    }
    apply(rec, policy(name));
    accumulate_grads(ref, 2);
    accumulate_grads(rec, 2);
    std::vector<std::string> bad;
    auto pb = rec->named_parameters();
    for (const auto& kv : ref->named_parameters()) {
      if (!kv.value().requires_grad()) continue;
      if (!torch::equal(kv.value().grad(), pb[kv.key()].grad())) bad.push_back(kv.key());
    }
    EXPECT_TRUE(bad.empty()) << name << ": " << bad.size() << " differ";
    EXPECT_EQ(live_saved_states(), 0);
  }
}

TEST(RecomputeGradsEdge, PrimitiveOnInputWithoutGrad) {
  auto m = make_model(tiny_options(0.0));
  auto block = m->block(0);
  auto x = torch::randn({2, 16, 32});  // requires_grad = false
  auto params = block->parameters();
  auto g_ref = torch::autograd::grad({block->forward(x).square().sum()}, params);
  auto y = run([&](const torch::Tensor& t) { return block->forward(t); }, x, params);
  auto g_rec = torch::autograd::grad({y.square().sum()}, params);
  ASSERT_EQ(g_ref.size(), g_rec.size());
  for (size_t i = 0; i < g_ref.size(); ++i) EXPECT_TRUE(torch::equal(g_ref[i], g_rec[i])) << i;
}

// torch::autograd::grad instead of backward(): parameter gradients come back through the Function.
TEST(RecomputeGradsEdge, AutogradGradWithRespectToParamsAndInput) {
  for (const char* name : {"full", "every_k", "selective"}) {
    auto ref = make_model(tiny_options());
    auto rec = make_model(tiny_options());
    apply(rec, policy(name, 2));
    auto grads_of = [](model::Gpt& m) {
      torch::manual_seed(7);
      Batch b = make_batch(3);
      auto loss = model::lm_loss(m->lm_logits(b.ids), b.targets);
      return torch::autograd::grad({loss}, m->parameters());
    };
    auto g_ref = grads_of(ref);
    auto g_rec = grads_of(rec);
    ASSERT_EQ(g_ref.size(), g_rec.size());
    for (size_t i = 0; i < g_ref.size(); ++i) EXPECT_TRUE(torch::equal(g_ref[i], g_rec[i])) << name << " param " << i;
    for (const auto& p : rec->parameters()) EXPECT_FALSE(p.grad().defined()) << "grad() must not touch .grad";
    EXPECT_EQ(live_saved_states(), 0);
  }
  // ... and with respect to a segment input that requires grad.
  auto m = make_model(tiny_options(0.0));
  auto block = m->block(1);
  auto x = torch::randn({2, 16, 32}).requires_grad_(true);
  auto gx_ref = torch::autograd::grad({block->forward(x).sum()}, {x})[0];
  auto gx_rec = torch::autograd::grad({run([&](const torch::Tensor& t) { return block->forward(t); }, x,
                                           block->parameters()).sum()},
                                      {x})[0];
  EXPECT_TRUE(torch::equal(gx_ref, gx_rec));
}

// The forward under CPU bf16 autocast on a seeded batch, then backward outside the autocast scope
// (as the trainer does); returns the loss.
double bf16_loss_and_backward(model::Gpt& m) {
  torch::manual_seed(9);
  Batch b = make_batch(5);
  torch::Tensor loss;
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  try {
    loss = model::lm_loss(m->lm_logits(b.ids), b.targets);
  } catch (...) {
    at::autocast::set_autocast_enabled(at::kCPU, false);
    throw;
  }
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  loss.backward();
  return loss.item<double>();
}

// Autocast is replayed: the backward runs outside the autocast scope, yet the recompute must
// compute in bf16 as the forward did.
TEST(RecomputeGradsEdge, AutocastStateIsReplayed) {
  auto ref = make_model(tiny_options());
  auto rec = make_model(tiny_options());
  apply(rec, policy("full"));
  for (auto* m : {&ref, &rec}) bf16_loss_and_backward(*m);
  auto bad = differing_grads(ref, rec);
  EXPECT_TRUE(bad.empty()) << bad.size() << " differ, first " << (bad.empty() ? "" : bad[0]);
}

// Selective recompute under bf16 autocast: its hand-written linear backward makes the casts autograd
// makes (bf16 matmuls, fp32 accumulation, gradients back to fp32), so the gradients match the
// model that stores everything under the same autocast within bf16 rounding; dropout on.
TEST(RecomputeGradsEdge, SelectiveUnderAutocastMatchesTheStoredBf16Model) {
  for (bool keep_attn : {false, true}) {
    auto ref = make_model(tiny_options());
    auto rec = make_model(tiny_options());
    Options opts;
    opts.recompute_attention_core = !keep_attn;
    apply(rec, policy("selective"), opts);
    std::vector<double> losses;
    for (auto* m : {&ref, &rec}) losses.push_back(bf16_loss_and_backward(*m));
    EXPECT_EQ(losses[0], losses[1]);  // the same forward: the recompute changes only what is saved
    auto rp = ref->named_parameters();
    auto cp = rec->named_parameters();
    int exact = 0;
    for (const auto& kv : rp) {
      const auto& g_ref = kv.value().grad();
      const auto& g_rec = cp[kv.key()].grad();
      ASSERT_TRUE(g_ref.defined() && g_rec.defined()) << kv.key();
      EXPECT_EQ(g_rec.scalar_type(), torch::kFloat) << kv.key();
      const double scale = g_ref.abs().max().item<double>() + 1e-12;
      const double diff = (g_ref - g_rec).abs().max().item<double>();
      EXPECT_LE(diff, 2e-2 * scale) << kv.key() << ": " << diff << " vs max " << scale;
      exact += torch::equal(g_ref, g_rec);
    }
    EXPECT_GT(exact, 0) << "no gradient matched exactly: the bf16 path is not the one autograd takes";
    EXPECT_EQ(live_saved_states(), 0);
  }
}

}  // namespace
}  // namespace ht::recompute::testing
