#include "model/generate.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace ht::model {
namespace {

// One next token from logits [V] (fp32, on any device). The scaling is done in double after
// subtracting the maximum: every scaled logit is then <= 0, so a tiny temperature (1e-300) sends
// the others to -inf (probability 0) instead of overflowing fp32 to inf - inf = nan; the most
// likely tokens keep 0, so sampling becomes greedy in the limit, as it should.
int64_t pick(torch::Tensor logits, const SamplingOptions& o, at::Generator& gen) {
  if (o.temperature == 0.0) return logits.argmax().item<int64_t>();
  logits = logits.to(torch::kCPU, torch::kDouble);
  logits = (logits - logits.max()) / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    const auto kth = std::get<0>(logits.topk(o.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = logits.sort(/*dim=*/0, /*descending=*/true);
    auto cum = sorted.softmax(0).cumsum(0);
    // Drop a token when the more likely ones already reach top_p; the most likely always stays.
    auto drop = (cum - sorted.softmax(0)) >= o.top_p;
    auto remove = torch::zeros_like(drop).scatter(0, order, drop);  // back to vocabulary order
    logits = logits.masked_fill(remove, -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(logits.softmax(0), 1, /*replacement=*/false, gen).item<int64_t>();
}

}  // namespace

void check_sampling(const GptImpl& gpt, int64_t prompt_tokens, const SamplingOptions& o) {
  const int64_t room = gpt.options().max_seq_len;
  HT_REQUIRE(o.max_new_tokens >= 1, ExitCode::kUsage, "--max-new-tokens {} must be >= 1", o.max_new_tokens);
  HT_REQUIRE(prompt_tokens >= 1, ExitCode::kUsage, "the prompt encodes to no token");
  // Compared as room - prompt: prompt + max_new_tokens overflows for counts near 2^63.
  HT_REQUIRE(prompt_tokens <= room && o.max_new_tokens <= room - prompt_tokens, ExitCode::kUsage,
             "--max-new-tokens {}: the prompt ({} tokens) + {} new tokens exceed the model's position table "
             "(model.max_seq_len = {}); at most {} new tokens fit",
             o.max_new_tokens, prompt_tokens, o.max_new_tokens, room, std::max<int64_t>(room - prompt_tokens, 0));
  HT_REQUIRE(o.temperature >= 0.0 && std::isfinite(o.temperature), ExitCode::kUsage,
             "--temperature {} must be a finite number >= 0 (0 = greedy)", o.temperature);
  HT_REQUIRE(o.top_k >= 0, ExitCode::kUsage, "--top-k {} must be >= 0 (0 = no limit)", o.top_k);
  HT_REQUIRE(o.top_p > 0.0 && o.top_p <= 1.0, ExitCode::kUsage, "--top-p {} must be in (0, 1]", o.top_p);
}

std::vector<int64_t> generate(GptImpl& gpt, const std::vector<int64_t>& prompt, const SamplingOptions& o,
                              at::Generator& gen) {
  check_sampling(gpt, static_cast<int64_t>(prompt.size()), o);
  const int64_t vocab = gpt.options().vocab_size;
  for (auto id : prompt)
    HT_REQUIRE(id >= 0 && id < vocab, ExitCode::kUsage, "prompt token id {} is outside the model's vocabulary of {}",
               id, vocab);
  const bool was_training = gpt.is_training();
  gpt.eval();
  torch::NoGradGuard no_grad;
  const auto device = gpt.wte->weight.device();
  auto ids = torch::tensor(prompt, torch::kLong).to(device).unsqueeze(0);
  std::vector<int64_t> out;
  KvCache cache;
  torch::Tensor logits = o.kv_cache ? gpt.lm_logits_cached(ids, cache) : gpt.lm_logits(ids);
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int64_t next = pick(logits[0][-1].to(torch::kFloat), o, gen);
    out.push_back(next);
    if (next == o.stop_id || i + 1 == o.max_new_tokens) break;
    auto next_t = torch::full({1, 1}, next, torch::TensorOptions().dtype(torch::kLong).device(device));
    if (o.kv_cache) {
      logits = gpt.lm_logits_cached(next_t, cache);
    } else {
      ids = torch::cat({ids, next_t}, 1);
      logits = gpt.lm_logits(ids);
    }
  }
  if (was_training) gpt.train();
  return out;
}

}  // namespace ht::model
