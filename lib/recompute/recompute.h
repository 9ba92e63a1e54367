// Activation recompute (activation/gradient checkpointing) for GPT blocks: the autograd primitive
// that drops a segment's activations in forward and recomputes them in backward, the selective
// block forward, and the policies (none | full | every_k | selective) installed as the model's
// BlockRunner. Not to be confused with lib/checkpoint (state files on disk). See docs/recompute.md.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/gpt.h"

namespace ht::recompute {

struct Options {
  // Save the RNG state (CPU and every CUDA device) before the forward and replay it in the
  // recompute, so dropout masks match. false exists only for the negative-control test.
  bool replay_rng = true;
  // selective: recompute the attention core (head split, SDPA with its dropout, merge) from the kept
  // qkv output, as Megatron's selective recomputation does; its s^2 tensors are the largest
  // activations when dropout forces the math SDPA path. false keeps the attention core's saved
  // tensors and recomputes only norms, GELU and residual dropout masks.
  bool recompute_attention_core = true;
};

// What the runner does with one block.
enum class BlockMode { kStore, kFull, kSelective };

// The per-block plan of a policy for a model of n_blocks blocks. Throws ht::Error(kUsage) for
// k < 1 or k > n_blocks, or first_n outside [0, n_blocks] (every_k).
std::vector<BlockMode> plan(const config::RecomputeConfig& cfg, size_t n_blocks);
std::string describe(const std::vector<BlockMode>& modes);  // e.g. "full: blocks 0,2 (2 of 4)"

// Installs the BlockRunner for cfg.policy (none | full | every_k | selective) on the model.
// Throws ht::Error(kUsage) for k out of range. In eval mode / under
// NoGradGuard the runner calls the block directly (documented no-op).
// Options from the config (recompute.attention_core); the three-argument form takes them explicitly.
void apply(model::Gpt& gpt, const config::RecomputeConfig& cfg);
void apply(model::Gpt& gpt, const config::RecomputeConfig& cfg, const Options& opts);

// The primitive: returns fn(x) computed without keeping fn's activations. Only x (and the RNG and
// autocast state) is saved; backward re-runs fn with grad enabled and returns the gradients of x
// and of `params` (the tensors fn uses whose gradients are wanted: a module's parameters). Works
// with backward() and torch::autograd::grad(); throws ht::Error(kRuntime) for what it cannot
// support: a second backward through the same graph (retain_graph), create_graph, a parameter
// that fn does not use, a recompute whose output differs in shape/dtype/device from the forward.
using SegmentFn = std::function<torch::Tensor(const torch::Tensor&)>;
torch::Tensor run(const SegmentFn& fn, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                  const Options& opts = {});

// The selective block forward: same numerics as Block::forward, but the cheap ops (layer norms,
// GELU, the residual dropout masks; the attention core too with opts.recompute_attention_core)
// are recomputed in backward while the matmul outputs are kept. See docs/recompute.md.
torch::Tensor selective_block(model::Block& block, const torch::Tensor& x, const Options& opts = {});

// Saved recompute states alive now (leak counter: 0 once every graph is released).
int64_t live_saved_states();

}  // namespace ht::recompute
