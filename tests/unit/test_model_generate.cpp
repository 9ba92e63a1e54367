// Sampling (model/generate.h): the up-front bound on --max-new-tokens holds near 2^63, and a tiny
// temperature samples the greedy tokens instead of failing on nan probabilities.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <limits>
#include <string>

#include "core/error.h"
#include "model/generate.h"

using ht::model::Gpt;
using ht::model::GptOptions;
using ht::model::SamplingOptions;

namespace {
Gpt tiny_model() {
  torch::manual_seed(7);
  GptOptions o;
  o.vocab_size = 258;
  o.n_layer = 2;
  o.n_head = 4;
  o.d_model = 32;
  o.max_seq_len = 64;
  return Gpt(o);
}

std::string usage_error(const Gpt& gpt, int64_t prompt_tokens, const SamplingOptions& o) {
  try {
    ht::model::check_sampling(*gpt, prompt_tokens, o);
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kUsage) << e.what();
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Generate, MaxNewTokensNearInt64MaxIsRefusedUpFront) {
  const Gpt gpt = tiny_model();
  SamplingOptions o;
  for (int64_t n : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 3, int64_t{61}}) {
    o.max_new_tokens = n;
    const std::string msg = usage_error(gpt, 4, o);
    EXPECT_NE(msg.find("--max-new-tokens " + std::to_string(n)), std::string::npos) << msg;
    EXPECT_NE(msg.find("at most 60 new tokens fit"), std::string::npos) << msg;
  }
  o.max_new_tokens = 1;
  EXPECT_NE(usage_error(gpt, 65, o).find("at most 0 new tokens fit"), std::string::npos);
  o.max_new_tokens = 60;
  EXPECT_EQ(usage_error(gpt, 4, o), "");
}

TEST(Generate, TinyTemperatureSamplesTheGreedyTokens) {
  Gpt gpt = tiny_model();
  const std::vector<int64_t> prompt = {84, 104, 101, 32};
  SamplingOptions greedy;
  greedy.max_new_tokens = 30;
  greedy.temperature = 0.0;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(42);
  const auto want = ht::model::generate(*gpt, prompt, greedy, gen);
  for (double t : {1e-300, std::numeric_limits<double>::denorm_min()}) {
    for (const auto& [k, p] : {std::pair<int64_t, double>{0, 1.0}, {5, 0.9}}) {
      SamplingOptions o = greedy;
      o.temperature = t;
      o.top_k = k;
      o.top_p = p;
      EXPECT_EQ(ht::model::generate(*gpt, prompt, o, gen), want) << "temperature " << t << " top_k " << k;
    }
  }
}

TEST(Generate, NegativeNanOrInfiniteTemperatureIsRefused) {
  const Gpt gpt = tiny_model();
  SamplingOptions o;
  o.max_new_tokens = 10;
  for (double t : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.temperature = t;
    EXPECT_NE(usage_error(gpt, 4, o).find("--temperature"), std::string::npos) << t;
  }
}
