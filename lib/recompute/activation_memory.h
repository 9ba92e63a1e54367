// The activation memory a policy keeps alive at the peak of one micro-batch's backward, predicted
// from the model shape with the per-tensor accounting of docs/recompute.md (fp32, CPU SDPA paths:
// the fused kernel without dropout keeps a logsumexp per head, the math path with dropout and the
// eager attention keep s^2 probability tensors). tests/bench/bench_checkpointing.cpp measures the same peak and prints
// both side by side; the trainer prints the prediction at start so a user sees what a policy saves.
#pragma once
#include <cstdint>

#include "config/config.h"

namespace ht::recompute {

struct ActivationShape {
  int64_t n_layer = 0, d_model = 0, n_head = 0, seq_len = 0, batch = 0, vocab = 0;
  double dropout = 0.0;
  bool eager_attention = false;  // model.attention = eager: the probabilities are kept without dropout too
};

// Bytes for `cfg` (policy, k/first_n, attention_core). Throws ht::Error(kUsage) for an every_k
// plan outside the model (as recompute::plan does).
double predicted_activation_bytes(const ActivationShape& shape, const config::RecomputeConfig& cfg);

}  // namespace ht::recompute
