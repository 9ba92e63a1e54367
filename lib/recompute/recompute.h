// Activation recompute (activation/gradient checkpointing) for GPT blocks.
// CONTRACT header written before the implementation; the recompute module owns and may extend it.
// Not to be confused with lib/checkpoint (state files on disk).
#pragma once
#include <torch/torch.h>

#include "config/config.h"
#include "model/gpt.h"

namespace ht::recompute {

// Installs the BlockRunner for cfg.policy (none | full | every_k | selective) on the model.
// Throws ht::Error(kUsage) for an unknown policy or k out of range. In eval mode / under
// NoGradGuard the runner calls the block directly (documented no-op).
void apply(model::Gpt& gpt, const config::RecomputeConfig& cfg);

}  // namespace ht::recompute
