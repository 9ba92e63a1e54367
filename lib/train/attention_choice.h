// model.attention = auto at start-up: the kernel model::choose_attention's rule gives for this run's
// device, precision and sequence length, or, when the run resumes, the one its checkpoint trained
// with, so that a resumed run computes exactly what the uninterrupted run would have.
#pragma once
#include <torch/types.h>

#include <optional>

#include "checkpoint/checkpoint.h"
#include "config/config.h"

namespace ht::train {

// Sets cfg.model.attention to sdpa or eager when it is auto; an explicit setting is left as it is.
// A checkpoint whose stored config names a kernel gives that kernel; one whose stored config says
// auto (written before the key existed, when every run used SDPA) gives sdpa. Returns a line that
// says what was chosen and why (empty when the setting was explicit).
std::string resolve_attention(config::Config& cfg, const torch::Device& device,
                              const std::optional<checkpoint::Snapshot>& resumed);

}  // namespace ht::train
