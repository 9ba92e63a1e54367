// model.init_from: the weights a new run starts from instead of a random init, either a Hugging
// Face GPT-2 directory (config.json + model.safetensors, e.g. from save_pretrained or `hpctrain
// export`) or an hpctrain checkpoint (its averaged model; its optimizer state, step and RNG are
// not taken). The source must describe the same model as the config; a mismatch is refused naming
// the field. A classification model may start from a language model: its head then keeps its
// random init (and a classification source's head is dropped by a language model).
#pragma once
#include "config/config.h"
#include "model/gpt.h"

namespace ht::interop {

// Copies cfg.model.init_from's weights into gpt when the key is set; does nothing otherwise.
// Reads files only (no collective): every rank that calls it loads the same weights. Throws
// ht::Error(kUsage / kData) naming model.init_from, the file and the field or tensor at fault.
void apply_init_from(model::GptImpl& gpt, const config::Config& cfg);

}  // namespace ht::interop
