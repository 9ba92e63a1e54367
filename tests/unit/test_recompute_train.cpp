// 50 AdamW steps of a tiny GPT with dropout: the loss curve under every recompute policy is
// bitwise equal to the one without recompute (CPU, deterministic).
#include "recompute_fixture.h"

namespace ht::recompute::testing {
namespace {

std::vector<double> loss_curve(const config::RecomputeConfig& cfg, int steps) {
  auto m = make_model(tiny_options(0.1));
  apply(m, cfg);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.1));
  torch::manual_seed(2024);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Batch b = make_batch(s % 7);  // a few batches revisited so the loss falls
    auto loss = model::lm_loss(m->lm_logits(b.ids), b.targets);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(m->parameters(), 1.0);
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

TEST(RecomputeTrain, FiftyStepLossCurveIsBitwiseIdentical) {
  const auto ref = loss_curve(policy("none"), 50);
  EXPECT_LT(ref.back(), ref.front()) << "the tiny model should learn something";
  for (const auto& cfg : {policy("full"), policy("every_k", 2), policy("every_k", 1, 1), policy("selective")}) {
    const auto got = loss_curve(cfg, 50);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got[i], ref[i]) << config::name_of(cfg.policy) << " step " << i;
  }
  EXPECT_EQ(live_saved_states(), 0);
}

}  // namespace
}  // namespace ht::recompute::testing
