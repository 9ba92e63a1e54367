// What the recompute primitive refuses or cleans up: leak counters back to zero after backward,
// after a dropped graph and after exceptions; loud failures for shape/dtype changes, a second
// backward, create_graph and unused parameters; policy validation; eval/no-grad is a no-op.
#include "recompute_fixture.h"

namespace ht::recompute::testing {
namespace {

torch::Tensor lm_loss_of(model::Gpt& m, int64_t seed = 1) {
  Batch b = make_batch(seed);
  return model::lm_loss(m->lm_logits(b.ids), b.targets);
}

TEST(RecomputeLeaks, StateFreedAfterBackwardEvenWhileGraphIsHeld) {
  for (const char* name : {"full", "every_k", "selective"}) {
    auto m = make_model(tiny_options());
    apply(m, policy(name, 2));
    auto loss = lm_loss_of(m);
    EXPECT_GT(live_saved_states(), 0) << name;
    loss.backward();
    EXPECT_EQ(live_saved_states(), 0) << name << ": state must be released by backward, not by the graph";
  }
}

TEST(RecomputeLeaks, StateFreedWhenGraphIsDroppedWithoutBackward) {
  auto m = make_model(tiny_options());
  apply(m, policy("selective"));
  {
    auto loss = lm_loss_of(m);
    EXPECT_GT(live_saved_states(), 0);
  }
  EXPECT_EQ(live_saved_states(), 0);
  apply(m, policy("full"));
  { auto logits = m->lm_logits(make_batch(2).ids); }
  EXPECT_EQ(live_saved_states(), 0);
}

TEST(RecomputeLeaks, StateFreedAfterExceptionInForwardAndInRecompute) {
  auto lin = torch::nn::Linear(4, 4);
  auto x = torch::randn({2, 4}, torch::requires_grad());
  int calls = 0;
  auto throws_second_time = [&](const torch::Tensor& t) {
    if (++calls == 2) throw std::runtime_error("boom in recompute");
    return lin->forward(t);
  };
  auto y = run(throws_second_time, x, lin->parameters());
  EXPECT_EQ(live_saved_states(), 1);
  EXPECT_THROW(y.sum().backward(), std::exception);
  y = torch::Tensor();
  EXPECT_EQ(live_saved_states(), 0);

  auto throws_now = [&](const torch::Tensor&) -> torch::Tensor { throw std::runtime_error("boom in forward"); };
  EXPECT_THROW(run(throws_now, x, lin->parameters()), std::exception);
  EXPECT_EQ(live_saved_states(), 0);
}

TEST(RecomputeLeaks, RngStateRestoredWhenRecomputeThrows) {
  auto x = torch::randn({8, 8}, torch::requires_grad());
  int calls = 0;
  auto fn = [&](const torch::Tensor& t) {
    auto y = torch::dropout(t, 0.5, true);
    if (++calls == 2) throw std::runtime_error("boom");
    return y;
  };
  auto y = run(fn, x, {});
  auto before = at::globalContext().defaultGenerator(c10::kCPU).get_state();
  EXPECT_THROW(y.sum().backward(), std::exception);
  EXPECT_TRUE(torch::equal(before, at::globalContext().defaultGenerator(c10::kCPU).get_state()));
}

TEST(RecomputeErrors, RecomputeWithDifferentShapeOrDtypeFails) {
  auto x = torch::randn({2, 4}, torch::requires_grad());
  int calls = 0;
  auto grows = [&](const torch::Tensor& t) { return ++calls == 1 ? t * 2 : torch::cat({t, t}) * 2; };
  auto y = run(grows, x, {});
  try {
    y.sum().backward();
    FAIL() << "expected ht::Error";
  } catch (const ht::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 4]"), std::string::npos) << e.what();
  }
  calls = 0;
  auto casts = [&](const torch::Tensor& t) { return ++calls == 1 ? t * 2 : (t * 2).to(torch::kDouble); };
  EXPECT_THROW(run(casts, x, {}).sum().backward(), ht::Error);
  EXPECT_EQ(live_saved_states(), 0);
}

TEST(RecomputeErrors, SecondBackwardAndCreateGraphAreRefused) {
  auto lin = torch::nn::Linear(4, 4);
  auto x = torch::randn({2, 4}, torch::requires_grad());
  auto fn = [&](const torch::Tensor& t) { return torch::tanh(lin->forward(t)); };
  auto loss = run(fn, x, lin->parameters()).sum();
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_THROW(loss.backward(), ht::Error);
  {
    auto loss2 = run(fn, x, lin->parameters()).sum();
    EXPECT_THROW(torch::autograd::grad({loss2}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true), ht::Error);
  }
  EXPECT_EQ(live_saved_states(), 0);
}

TEST(RecomputeErrors, ParameterTheSegmentDoesNotUseIsAnErrorNotAZero) {
  auto used = torch::nn::Linear(4, 4), unused = torch::nn::Linear(4, 4);
  auto x = torch::randn({2, 4});
  std::vector<torch::Tensor> params = used->parameters();
  params.push_back(unused->weight);
  auto y = run([&](const torch::Tensor& t) { return used->forward(t); }, x, params);
  EXPECT_THROW(y.sum().backward(), ht::Error);
}

TEST(RecomputeErrors, InPlaceParameterUpdateBeforeBackwardIsDetected) {
  auto lin = torch::nn::Linear(4, 4);
  auto x = torch::randn({2, 4});
  auto y = run([&](const torch::Tensor& t) { return lin->forward(t); }, x, lin->parameters());
  {
    torch::NoGradGuard g;
    lin->weight.add_(1.0);
  }
  EXPECT_THROW(y.sum().backward(), std::exception);
}

TEST(RecomputeValidation, BadPolicyAndKAreUsageErrors) {
  auto expect_usage = [](const config::RecomputeConfig& c, const char* needle) {
    try {
      plan(c, 4);
      FAIL() << "expected ht::Error for " << config::name_of(c.policy);
    } catch (const ht::Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  try {
    policy("sometimes");
    FAIL() << "expected ht::Error for an unknown policy";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("recompute.policy"), std::string::npos) << e.what();
  }
  expect_usage(policy("every_k", 0), "recompute.k");
  expect_usage(policy("every_k", 5), "recompute.k");
  expect_usage(policy("every_k", 1, 5), "recompute.first_n");
  expect_usage(policy("every_k", 1, -1), "recompute.first_n");
  auto m = make_model(tiny_options());
  EXPECT_THROW(apply(m, policy("every_k", 7)), ht::Error);
}

TEST(RecomputeValidation, PlansSelectTheDocumentedBlocks) {
  using M = BlockMode;
  EXPECT_EQ(plan(policy("every_k", 2), 5), (std::vector<M>{M::kFull, M::kStore, M::kFull, M::kStore, M::kFull}));
  EXPECT_EQ(plan(policy("every_k", 1, 2), 4), (std::vector<M>{M::kFull, M::kFull, M::kStore, M::kStore}));
  EXPECT_EQ(plan(policy("full"), 2), (std::vector<M>{M::kFull, M::kFull}));
  EXPECT_EQ(plan(policy("none"), 2), (std::vector<M>{M::kStore, M::kStore}));
  EXPECT_EQ(describe(plan(policy("every_k", 2), 4)), "full: blocks 0,2 (2 of 4)");
}

TEST(RecomputeNoOp, EvalModeAndNoGradCallTheBlockDirectly) {
  auto ref = make_model(tiny_options());
  auto rec = make_model(tiny_options());
  apply(rec, policy("full"));
  Batch b = make_batch(4);
  {
    torch::NoGradGuard g;
    auto out = rec->lm_logits(b.ids);  // training mode, no grad: dropout drawn, nothing saved
    EXPECT_EQ(live_saved_states(), 0);
  }
  ref->eval();
  rec->eval();
  auto a = ref->lm_logits(b.ids);
  auto c = rec->lm_logits(b.ids);
  EXPECT_EQ(live_saved_states(), 0);
  EXPECT_TRUE(torch::equal(a, c));
}

}  // namespace
}  // namespace ht::recompute::testing
