// Policies: which blocks the runner recomputes, and the BlockRunner installed on the model.
#include "recompute/recompute.h"

#include <fmt/ranges.h>

#include "core/error.h"

namespace ht::recompute {

std::vector<BlockMode> plan(const config::RecomputeConfig& cfg, size_t n_blocks) {
  const auto n = static_cast<int64_t>(n_blocks);
  std::vector<BlockMode> modes(n_blocks, BlockMode::kStore);
  switch (cfg.policy) {
    case config::RecomputePolicy::kNone: return modes;
    case config::RecomputePolicy::kFull: return std::vector<BlockMode>(n_blocks, BlockMode::kFull);
    case config::RecomputePolicy::kSelective: return std::vector<BlockMode>(n_blocks, BlockMode::kSelective);
    case config::RecomputePolicy::kEveryK: break;
  }
  HT_REQUIRE(cfg.first_n >= 0 && cfg.first_n <= n, ExitCode::kUsage,
             "recompute.first_n = {} must be in [0, model.n_layer = {}]", cfg.first_n, n);
  if (cfg.first_n > 0) {
    for (int64_t i = 0; i < cfg.first_n; ++i) modes[i] = BlockMode::kFull;
    return modes;
  }
  HT_REQUIRE(cfg.k >= 1 && cfg.k <= n, ExitCode::kUsage, "recompute.k = {} must be in [1, model.n_layer = {}]", cfg.k,
             n);
  for (int64_t i = 0; i < n; i += cfg.k) modes[i] = BlockMode::kFull;
  return modes;
}

std::string describe(const std::vector<BlockMode>& modes) {
  std::vector<std::string> full, selective;
  for (size_t i = 0; i < modes.size(); ++i) {
    if (modes[i] == BlockMode::kFull) full.push_back(std::to_string(i));
    if (modes[i] == BlockMode::kSelective) selective.push_back(std::to_string(i));
  }
  if (full.empty() && selective.empty()) return fmt::format("none (all {} blocks store activations)", modes.size());
  if (!selective.empty())
    return fmt::format("selective: blocks {} ({} of {})", fmt::join(selective, ","), selective.size(), modes.size());
  return fmt::format("full: blocks {} ({} of {})", fmt::join(full, ","), full.size(), modes.size());
}

void apply(model::Gpt& gpt, const config::RecomputeConfig& cfg) {
  Options opts;
  opts.recompute_attention_core = cfg.attention_core;
  apply(gpt, cfg, opts);
}

void apply(model::Gpt& gpt, const config::RecomputeConfig& cfg, const Options& opts) {
  const std::vector<BlockMode> modes = plan(cfg, gpt->num_blocks());
  gpt->set_block_runner([modes, opts](size_t i, model::Block& block, const torch::Tensor& x) -> torch::Tensor {
    // Evaluation (eval mode or no grad): nothing is saved anyway, so recompute is a no-op.
    if (modes[i] == BlockMode::kStore || !torch::GradMode::is_enabled() || !block->is_training())
      return block->forward(x);
    if (modes[i] == BlockMode::kSelective) return selective_block(block, x, opts);
    auto b = block.ptr();
    return run([b](const torch::Tensor& t) { return b->forward(t); }, x, block->parameters(), opts);
  });
}

}  // namespace ht::recompute
