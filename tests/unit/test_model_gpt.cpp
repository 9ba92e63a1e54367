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
