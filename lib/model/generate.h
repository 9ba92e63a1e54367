// Autoregressive sampling from a Gpt: greedy (temperature 0) or temperature / top-k / top-p
// (nucleus) sampling, with the KV cache (one new position per token) or without it (the whole
// prefix again per token, kept to measure what the cache saves). Draws come only from the
// generator passed in, so sampling during training leaves the training RNG streams untouched.
#pragma once
#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "model/gpt.h"

namespace ht::model {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;  // 0 = greedy (argmax)
  int64_t top_k = 0;         // 0 = no limit
  double top_p = 1.0;        // 1 = no limit
  bool kv_cache = true;
  int64_t stop_id = -1;      // stop after generating this id (e.g. <eos>); -1 = never
};

// Checks the options and that prompt + max_new_tokens fits the position table; throws
// ht::Error(kUsage) naming the option.
void check_sampling(const GptImpl& gpt, int64_t prompt_tokens, const SamplingOptions& o);

// The new token ids that follow `prompt` (not the prompt itself). Runs in eval mode without
// gradients and restores the module's training mode. `gen` is a CPU generator (probabilities are
// moved to the CPU to draw).
std::vector<int64_t> generate(GptImpl& gpt, const std::vector<int64_t>& prompt, const SamplingOptions& o,
                              at::Generator& gen);

}  // namespace ht::model
