#include "recompute/activation_memory.h"

#include <algorithm>
#include <vector>

#include "recompute/recompute.h"

namespace ht::recompute {
namespace {

constexpr double kFloat = 4.0;  // fp32 activations

// s^2 tensors one attention core keeps for backward: with dropout (math SDPA or eager) the
// probabilities, the mask and the dropped probabilities; eager without dropout the probabilities.
double score_tensors(const ActivationShape& x) { return x.dropout > 0 ? 3.0 : x.eager_attention ? 1.0 : 0.0; }

// One block's stored activations.
double per_layer_store_bytes(const ActivationShape& x) {
  const double s = x.seq_len, b = x.batch, h = x.d_model, a = x.n_head;
  if (x.dropout > 0) return kFloat * (18.0 * s * b * h + 3.0 * a * s * s * b);  // math SDPA keeps s^2 tensors
  if (x.eager_attention) return kFloat * (16.0 * s * b * h + a * s * s * b);      // the scaled q and the probabilities
  return kFloat * (16.0 * s * b * h + a * s * b);                              // fused SDPA keeps logsumexp
}

// Peak in units of one stored block: at the start of backward all stored blocks are alive; while
// block i is recomputed, the stored blocks before it plus its own transient activations are.
double store_units(const std::vector<BlockMode>& plan) {
  double stored = 0, peak = 0;
  for (auto m : plan) {
    if (m == BlockMode::kFull) peak = std::max(peak, stored + 1);
    if (m == BlockMode::kStore) stored += 1;
  }
  return std::max(peak, stored);
}

}  // namespace

double predicted_activation_bytes(const ActivationShape& x, const config::RecomputeConfig& cfg) {
  const double s = x.seq_len, b = x.batch, h = x.d_model, a = x.n_head, V = x.vocab, L = x.n_layer;
  const double sbh = s * b * h;
  const bool dropout = x.dropout > 0;
  // Embedding dropout mask, final norm in/out; log-probs, their gradient and the logits' gradient
  // at the start of backward.
  const double head = kFloat * ((dropout ? 3.0 : 2.0) * sbh + 3.0 * s * b * V);
  if (cfg.policy == config::RecomputePolicy::kSelective) {
    // Kept per block: x, qkv, y, h, the MLP's first output (10 sbh), plus with attention_core =
    // false the attention core's own tensors (its s^2 tensors on the math path).
    const double scores = score_tensors(x);
    if (cfg.attention_core) {
      // One attention core (or norm/GELU) recomputed at a time.
      const double transient = scores > 0 ? kFloat * scores * a * s * s * b : kFloat * 5.0 * sbh;
      return L * kFloat * 10.0 * sbh + transient + head;
    }
    const double kept = kFloat * (10.0 * sbh + scores * a * s * s * b);
    return L * kept + kFloat * 5.0 * sbh + head;  // + one GELU/norm recompute
  }
  const auto modes = plan(cfg, static_cast<size_t>(x.n_layer));
  double n_inputs = 0;  // a recomputed block keeps its input
  for (auto m : modes) n_inputs += m == BlockMode::kFull ? 1 : 0;
  return store_units(modes) * per_layer_store_bytes(x) + n_inputs * kFloat * sbh + head;
}

}  // namespace ht::recompute
