// Shared helpers for the recompute tests: tiny GPT twins with identical weights, synthetic token
// batches, and bitwise comparison of parameter gradients.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "model/gpt.h"
#include "recompute/recompute.h"

namespace ht::recompute::testing {

inline model::GptOptions tiny_options(double dropout = 0.1, int64_t n_layer = 4) {
  model::GptOptions o;
  o.vocab_size = 32;
  o.n_layer = n_layer;
  o.n_head = 2;
  o.d_model = 32;
  o.max_seq_len = 16;
  o.dropout = dropout;
  return o;
}

// Same seed, same init: the twin models start bitwise identical.
inline model::Gpt make_model(const model::GptOptions& o, uint64_t seed = 1234) {
  torch::manual_seed(seed);
  model::Gpt m(o);
  m->train();
  return m;
}

// A policy by its config name, parsed the way a config file is (an unknown name throws kUsage).
inline config::RecomputeConfig policy(const std::string& name, int64_t k = 1, int64_t first_n = 0) {
  config::Config cfg;
  config::apply_override(cfg, "recompute.policy=" + name);
  config::RecomputeConfig c = cfg.recompute;
  c.k = k;
  c.first_n = first_n;
  return c;
}

struct Batch {
  torch::Tensor ids, targets;
};

inline Batch make_batch(int64_t seed, int64_t batch = 3, int64_t seq_len = 16, int64_t vocab = 32) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  auto ids = torch::randint(vocab, {batch, seq_len + 1}, gen, torch::kLong);
  return {ids.narrow(1, 0, seq_len).contiguous(), ids.narrow(1, 1, seq_len).contiguous()};
}

// Forward + backward over `micro` micro-batches from a fixed RNG seed; returns the summed loss.
inline double accumulate_grads(model::Gpt& m, int micro, uint64_t rng_seed = 42) {
  m->zero_grad();
  torch::manual_seed(rng_seed);
  double total = 0.0;
  for (int i = 0; i < micro; ++i) {
    Batch b = make_batch(100 + i);
    auto loss = model::lm_loss(m->lm_logits(b.ids), b.targets) / static_cast<double>(micro);
    loss.backward();
    total += loss.item<double>();
  }
  return total;
}

// Names of parameters whose gradients differ bitwise (empty = all equal).
inline std::vector<std::string> differing_grads(model::Gpt& a, model::Gpt& b) {
  std::vector<std::string> bad;
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& kv : pa) {
    const auto& ga = kv.value().grad();
    const auto& gb = pb[kv.key()].grad();
    if (!ga.defined() || !gb.defined() || !torch::equal(ga, gb)) bad.push_back(kv.key());
  }
  return bad;
}

}  // namespace ht::recompute::testing
