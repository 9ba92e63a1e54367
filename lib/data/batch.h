// One micro-batch as the loader hands it to the model (see loader.h for what a sample is).
#pragma once
#include <torch/types.h>

#include <cstdint>

namespace ht::data {

struct Batch {
  torch::Tensor input;       // [B, T] int64 token ids
  torch::Tensor target;      // causal-lm: [B, T] int64 next tokens; classification: [B] int64 labels
  torch::Tensor mask;        // classification: [B, T] (1 = real token); causal-lm: undefined
  int64_t num_tokens = 0;    // tokens in input (for tokens/s)
  torch::Tensor sample_ids;  // [B] int64 global sample indices (tests, debugging)
};

}  // namespace ht::data
