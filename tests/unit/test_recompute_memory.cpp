// Measured (counting CPU allocator) bytes that one transformer block keeps alive between forward
// and backward under each policy, against the per-layer formula of docs/recompute.md:
//   store, dropout > 0 (math SDPA):  4 * (18 sbh + 3 a s^2 b)    store, dropout = 0 (flash SDPA): 4 * 16 sbh
//   store, dropout = 0, eager attention: 4 * (16 sbh + a s^2 b)
//   selective: 4 * 10 sbh   (keeping the attention core: 10 sbh, + 3 a s^2 b with dropout)
//   full: 4 * sbh (the input only)
// plus small terms (layer-norm statistics, logsumexp, RNG states) that the tolerance absorbs.
#include "core/memory.h"
#include "recompute/activation_memory.h"
#include "recompute_fixture.h"

namespace ht::recompute::testing {
namespace {

constexpr int64_t B = 4, T = 64, D = 64, H = 4;

// Bytes the block keeps alive after its forward: the new allocations that stay (minus the output,
// which is the next block's input and counted there) plus the input x, which the block's graph
// keeps (x was allocated before the measurement started).
double kept_bytes(const std::string& name, double dropout, bool attention_core = true,
                  config::AttentionKernel kernel = config::AttentionKernel::kSdpa) {
  memory::install_cpu_counter();
  model::GptOptions o = tiny_options(dropout, 1);
  o.d_model = D, o.n_head = H, o.max_seq_len = T;
  o.attention = kernel;
  auto m = make_model(o);
  apply(m, policy(name));
  auto x = torch::randn({B, T, D}, torch::requires_grad());
  const int64_t base = memory::cpu_current_bytes();
  torch::Tensor y;
  model::Block block = m->block(0);
  if (name == "selective")
    y = selective_block(block, x, Options{true, attention_core});
  else if (name == "full")
    y = run([&](const torch::Tensor& t) { return block->forward(t); }, x, block->parameters());
  else
    y = block->forward(x);
  const double kept = static_cast<double>(memory::cpu_current_bytes() - base - y.nbytes() + x.nbytes());
  std::printf("measured %s dropout %.1f core %d: %.3f sbh-units\n", name.c_str(), dropout, attention_core ? 1 : 0,
              kept / (4.0 * B * T * D));
  y.sum().backward();
  return kept;
}

double sbh_bytes() { return 4.0 * B * T * D; }

TEST(RecomputeMemory, StoreWithDropoutMatchesFormula) {
  const double want = 4.0 * (18.0 * B * T * D + 3.0 * H * T * T * B);
  const double got = kept_bytes("none", 0.1);
  EXPECT_NEAR(got, want, 0.05 * want) << "got " << got / sbh_bytes() << " sbh-units, formula " << want / sbh_bytes();
}

TEST(RecomputeMemory, StoreWithoutDropoutMatchesFormula) {
  const double want = 16.0 * sbh_bytes();
  const double got = kept_bytes("none", 0.0);
  EXPECT_NEAR(got, want, 0.05 * want) << "got " << got / sbh_bytes() << " sbh-units";
}

TEST(RecomputeMemory, StoreWithEagerAttentionMatchesFormula) {
  const double want = 4.0 * (16.0 * B * T * D + 1.0 * H * T * T * B);
  const double got = kept_bytes("none", 0.0, true, config::AttentionKernel::kEager);
  EXPECT_NEAR(got, want, 0.05 * want) << "got " << got / sbh_bytes() << " sbh-units, formula " << want / sbh_bytes();
  ActivationShape shape{1, D, H, T, B, 258, 0.0, false};
  const double sdpa = predicted_activation_bytes(shape, config::RecomputeConfig{});
  shape.eager_attention = true;
  const double eager = predicted_activation_bytes(shape, config::RecomputeConfig{});
  EXPECT_DOUBLE_EQ(eager - sdpa, 4.0 * (H * T * T * B - H * T * B)) << "the trainer's prediction uses the same terms";
}

TEST(RecomputeMemory, SelectiveKeepingAttentionMatchesFormula) {
  const double s2 = 4.0 * 3.0 * H * T * T * B;
  const double with_dropout = kept_bytes("selective", 0.1, false), without = kept_bytes("selective", 0.0, false);
  EXPECT_NEAR(with_dropout, 10.0 * sbh_bytes() + s2, 0.05 * (10.0 * sbh_bytes() + s2))
      << "got " << (with_dropout - s2) / sbh_bytes() << " sbh-units + s^2 terms";
  EXPECT_NEAR(without, 10.0 * sbh_bytes(), 0.05 * 10.0 * sbh_bytes()) << "got " << without / sbh_bytes();
}

TEST(RecomputeMemory, SelectiveMatchesFormula) {
  for (double p : {0.0, 0.1}) {
    const double want = 10.0 * sbh_bytes();
    const double got = kept_bytes("selective", p);
    EXPECT_NEAR(got, want, 0.05 * want) << "dropout " << p << ": got " << got / sbh_bytes() << " sbh-units";
  }
}

// The config key recompute.attention_core reaches the blocks: through the whole model's forward,
// keeping the attention core (false) holds each block's s^2 tensors (3 a s^2 b floats) on top.
TEST(RecomputeMemory, ConfigAttentionCoreFalseKeepsTheScoresOfEveryBlock) {
  constexpr int64_t L = 2;
  auto kept_by_model = [&](bool attention_core) {
    memory::install_cpu_counter();
    model::GptOptions o = tiny_options(0.1, L);
    o.d_model = D, o.n_head = H, o.max_seq_len = T;
    auto m = make_model(o);
    auto cfg = policy("selective");
    cfg.attention_core = attention_core;
    apply(m, cfg);
    auto ids = torch::randint(0, o.vocab_size, {B, T}, torch::kLong);
    const int64_t base = memory::cpu_current_bytes();
    auto logits = m->lm_logits(ids);
    const double kept = static_cast<double>(memory::cpu_current_bytes() - base);
    logits.sum().backward();
    return kept;
  };
  const double s2_per_block = 4.0 * 3.0 * H * T * T * B;
  const double diff = kept_by_model(false) - kept_by_model(true);
  EXPECT_NEAR(diff, L * s2_per_block, 0.1 * L * s2_per_block)
      << "kept " << diff / s2_per_block << " blocks' worth of s^2 tensors more, expected " << L;
}

TEST(RecomputeMemory, FullKeepsOnlyTheInput) {
  for (double p : {0.0, 0.1}) {
    const double got = kept_bytes("full", p);
    // The input plus the RNG state (about 5 KB for the CPU generator).
    EXPECT_NEAR(got, sbh_bytes(), 0.1 * sbh_bytes()) << "dropout " << p << ": got " << got << " bytes";
  }
}

}  // namespace
}  // namespace ht::recompute::testing
