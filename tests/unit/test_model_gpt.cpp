// GPT model: shapes, causal masking, untrained loss near ln(vocab), classification head, FLOPs.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.h"

using ht::model::Gpt;
using ht::model::GptOptions;

namespace {
GptOptions tiny(int64_t vocab = 258, int64_t labels = 0) {
  GptOptions o;
  o.vocab_size = vocab;
  o.n_layer = 2;
  o.n_head = 4;
  o.d_model = 32;
  o.max_seq_len = 16;
  o.num_labels = labels;
  return o;
}
}  // namespace

TEST(Gpt, OutputShapes) {
  torch::manual_seed(0);
  Gpt gpt(tiny(258, 5));
  auto ids = torch::randint(0, 258, {3, 16}, torch::kLong);
  EXPECT_EQ(gpt->hidden(ids).sizes(), (std::vector<int64_t>{3, 16, 32}));
  EXPECT_EQ(gpt->lm_logits(ids).sizes(), (std::vector<int64_t>{3, 16, 258}));
  EXPECT_EQ(gpt->class_logits(ids, torch::ones({3, 16})).sizes(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(gpt->num_blocks(), 2u);
}

TEST(Gpt, ParameterNamesFollowTheCheckpointLayout) {
  Gpt gpt(tiny());
  auto params = gpt->named_parameters();
  for (const char* name : {"wte.weight", "wpe.weight", "blocks.0.ln1.weight", "blocks.0.attn.qkv.weight",
                           "blocks.0.attn.proj.bias", "blocks.1.mlp.fc.weight", "blocks.1.mlp.proj.weight",
                           "ln_f.bias"})
    EXPECT_NE(params.find(name), nullptr) << name;
  EXPECT_EQ(params.find("lm_head.weight"), nullptr) << "the LM head is tied to wte";
}

TEST(Gpt, CausalMaskingFutureTokensDoNotChangeEarlierLogits) {
  torch::manual_seed(1);
  Gpt gpt(tiny());
  gpt->eval();
  auto ids = torch::randint(0, 258, {2, 16}, torch::kLong);
  auto changed = ids.clone();
  changed.index_put_({torch::indexing::Slice(), torch::indexing::Slice(10)},
                     torch::randint(0, 258, {2, 6}, torch::kLong));
  auto a = gpt->lm_logits(ids), b = gpt->lm_logits(changed);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::allclose(a.index({Slice(), Slice(0, 10)}), b.index({Slice(), Slice(0, 10)}), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(a.index({Slice(), Slice(10)}), b.index({Slice(), Slice(10)}), 1e-5, 1e-6));
}

TEST(Gpt, UntrainedLossIsNearLnVocab) {
  torch::manual_seed(2);
  Gpt gpt(tiny(1000));
  gpt->eval();
  auto ids = torch::randint(0, 1000, {8, 16}, torch::kLong);
  auto targets = torch::randint(0, 1000, {8, 16}, torch::kLong);
  const double loss = ht::model::lm_loss(gpt->lm_logits(ids), targets).item<double>();
  EXPECT_NEAR(loss, std::log(1000.0), 0.1);
}

TEST(Gpt, RejectsSequenceLongerThanPositionTable) {
  Gpt gpt(tiny());
  EXPECT_THROW(gpt->lm_logits(torch::zeros({1, 17}, torch::kLong)), std::exception);
}

TEST(Gpt, PaddingDoesNotChangePooledClassification) {
  torch::manual_seed(3);
  Gpt gpt(tiny(258, 3));
  gpt->eval();
  auto ids = torch::randint(0, 256, {1, 16}, torch::kLong);
  auto mask = torch::ones({1, 16});
  mask.index_put_({0, torch::indexing::Slice(8)}, 0);
  auto other = ids.clone();
  other.index_put_({0, torch::indexing::Slice(8)}, 256);  // different padding content after position 8
  EXPECT_TRUE(torch::allclose(gpt->class_logits(ids, mask), gpt->class_logits(other, mask), 1e-5, 1e-6));
}

TEST(Gpt, FlopsPerTokenMatchesSixNPlusAttention) {
  Gpt gpt(tiny());
  const double L = 2, d = 32, V = 258, T = 16;
  EXPECT_DOUBLE_EQ(gpt->flops_per_token(16), 6 * (12 * L * d * d + d * V) + 12 * L * d * T);
}

namespace {
using ht::config::AttentionKernel;

// Output and gradient of one attention core for a packed qkv of `dtype`, with a fixed upstream gradient.
std::pair<torch::Tensor, torch::Tensor> attention_and_grad(const torch::Tensor& qkv, const torch::Tensor& grad_out,
                                                           AttentionKernel kernel, torch::ScalarType dtype) {
  auto x = qkv.to(dtype).detach().requires_grad_(true);
  auto y = ht::model::causal_attention(x, /*n_head=*/4, /*dropout_p=*/0.0, kernel);
  y.backward(grad_out.to(dtype));
  return {y.detach().to(torch::kDouble), x.grad().to(torch::kDouble)};
}
}  // namespace

TEST(Attention, EagerEqualsSdpaInFp32) {
  torch::manual_seed(4);
  const auto qkv = torch::randn({3, 16, 3 * 32}), grad = torch::randn({3, 16, 32});
  const auto [ye, ge] = attention_and_grad(qkv, grad, AttentionKernel::kEager, torch::kFloat);
  const auto [ys, gs] = attention_and_grad(qkv, grad, AttentionKernel::kSdpa, torch::kFloat);
  EXPECT_LT((ye - ys).abs().max().item<double>(), 1e-5);
  EXPECT_LT((ge - gs).abs().max().item<double>(), 1e-5);
}

// In bf16 each path rounds differently; both must be as close to the fp64 computation as bf16 allows.
TEST(Attention, EagerInBf16IsAsCloseToFp64AsSdpaInBf16) {
  torch::manual_seed(5);
  const auto qkv = torch::randn({3, 16, 3 * 32}), grad = torch::randn({3, 16, 32});
  const auto [y64, g64] = attention_and_grad(qkv, grad, AttentionKernel::kSdpa, torch::kDouble);
  for (auto kernel : {AttentionKernel::kEager, AttentionKernel::kSdpa}) {
    const auto [y, g] = attention_and_grad(qkv, grad, kernel, torch::kBFloat16);
    const double y_err = (y - y64).abs().max().item<double>(), g_err = (g - g64).abs().max().item<double>();
    const double y_scale = y64.abs().max().item<double>(), g_scale = g64.abs().max().item<double>();
    // bf16 keeps 8 significant bits (relative 2^-8 = 0.4 %): a few roundings along the way.
    EXPECT_LT(y_err, 0.03 * y_scale) << ht::config::name_of(kernel);
    EXPECT_LT(g_err, 0.03 * g_scale) << ht::config::name_of(kernel);
  }
}

TEST(Attention, EagerDropsProbabilitiesOnlyWhenAsked) {
  torch::manual_seed(6);
  const auto qkv = torch::randn({2, 16, 3 * 32});
  const auto plain = ht::model::causal_attention(qkv, 4, 0.0, AttentionKernel::kEager);
  torch::manual_seed(7);
  const auto dropped = ht::model::causal_attention(qkv, 4, 0.5, AttentionKernel::kEager);
  torch::manual_seed(7);
  const auto again = ht::model::causal_attention(qkv, 4, 0.5, AttentionKernel::kEager);
  EXPECT_FALSE(torch::allclose(plain, dropped));
  EXPECT_TRUE(torch::equal(dropped, again)) << "dropout draws from the generator, as every other dropout does";
  EXPECT_TRUE(torch::allclose(plain, ht::model::causal_attention(qkv, 4, 0.0, AttentionKernel::kSdpa), 1e-5, 1e-6));
}

// The whole model with set_attention: the same logits and parameter gradients as with SDPA.
TEST(Attention, ModelWithEagerAttentionTrainsLikeSdpa) {
  auto grads_of = [](AttentionKernel kernel) {
    torch::manual_seed(8);
    Gpt gpt(tiny());
    gpt->set_attention(kernel);
    torch::manual_seed(9);
    auto ids = torch::randint(0, 258, {2, 16}, torch::kLong);
    auto targets = torch::randint(0, 258, {2, 16}, torch::kLong);
    ht::model::lm_loss(gpt->lm_logits(ids), targets).backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : gpt->parameters()) g.push_back(p.grad().clone());
    return std::make_pair(gpt->options().attention, g);
  };
  const auto [eager_kind, eager] = grads_of(AttentionKernel::kEager);
  const auto [sdpa_kind, sdpa] = grads_of(AttentionKernel::kSdpa);
  EXPECT_EQ(eager_kind, AttentionKernel::kEager);
  EXPECT_EQ(sdpa_kind, AttentionKernel::kSdpa);
  ASSERT_EQ(eager.size(), sdpa.size());
  bool any_differs = false;
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(torch::allclose(eager[i], sdpa[i], 1e-4, 1e-6)) << "parameter " << i;
    any_differs = any_differs || !torch::equal(eager[i], sdpa[i]);
  }
  EXPECT_TRUE(any_differs) << "the two kernels round differently: identical gradients mean one kernel ran twice";
}

TEST(Attention, AutoRuleTakesEagerForBf16OnACpuUpTo512Positions) {
  using ht::model::choose_attention;
  EXPECT_EQ(choose_attention(/*cuda=*/false, /*bf16=*/true, 128), AttentionKernel::kEager);
  EXPECT_EQ(choose_attention(false, true, 512), AttentionKernel::kEager);
  EXPECT_EQ(choose_attention(false, true, 513), AttentionKernel::kSdpa);
  EXPECT_EQ(choose_attention(false, false, 128), AttentionKernel::kSdpa);
  EXPECT_EQ(choose_attention(true, true, 128), AttentionKernel::kSdpa);
}
