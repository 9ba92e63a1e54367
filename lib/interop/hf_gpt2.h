// Hugging Face transformers' GPT-2 (GPT2LMHeadModel) as seen from hpctrain: the tensor names and
// layouts of its state dict, and its config.json. Our Gpt is GPT-2's architecture (pre-norm blocks,
// fused q|k|v projection in that order, tanh GELU, LayerNorm eps 1e-5, tied LM head), so the
// weights map one to one; transformers keeps the four block projections as Conv1D, whose weight
// is [in, out], the transpose of our Linear's [out, in]. The table is docs/interop.md.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/gpt.h"

namespace ht::interop {

// One weight: our parameter name, the transformers name and whether the layout is transposed.
struct Gpt2Name {
  std::string ours;       // "blocks.0.attn.qkv.weight"
  std::string hf;         // "transformer.h.0.attn.c_attn.weight"
  bool transposed = false;
  bool bias_of_linear = false;  // a Linear bias: absent from our model when model.bias = false
};

// Every GPT2LMHeadModel weight of a model with n_layer blocks (lm_head.weight is tied to wte and
// not listed, as transformers' save_pretrained leaves it out too).
std::vector<Gpt2Name> gpt2_names(int64_t n_layer);

// The model's backbone as transformers tensors (contiguous fp32 CPU, in gpt2_names order); biases
// of a model without them (model.bias = false) are written as zeros, which computes the same.
std::vector<std::pair<std::string, torch::Tensor>> to_gpt2_tensors(const model::GptImpl& gpt);

// Copies the GPT-2 weights of `file` into gpt. Names may carry the "transformer." prefix (what
// save_pretrained writes) or not (the original OpenAI upload); the causal-mask buffers
// (attn.bias, attn.masked_bias) are ignored; lm_head.weight, when present, must equal wte (our
// head is tied). Throws ht::Error(kUsage) naming `what` and the tensor for a missing tensor, a
// shape mismatch, a non-float dtype, non-zero biases for a model without biases, or an unknown
// tensor.
void load_gpt2_tensors(model::GptImpl& gpt, const io::SafeTensorsFile& file, const std::string& what);

// The GPT2Config of transformers for a model of these options, as JSON text. eos/bos are our
// <eos> (the document separator, which also starts every document), pad our <pad>.
std::string gpt2_config_json(const model::GptOptions& o);

// The fields of a GPT2Config that decide whether its weights fit a model.
struct Gpt2Config {
  int64_t vocab_size = 0, n_positions = 0, n_embd = 0, n_layer = 0, n_head = 0, n_inner = 0;
  std::string activation_function;
  double layer_norm_epsilon = 0.0;
  bool tie_word_embeddings = true, scale_attn_weights = true, scale_attn_by_inverse_layer_idx = false;
};
// Reads <dir>/config.json (hf_config.cpp). Throws ht::Error naming `what` and the file: kUsage when
// it is missing or not model_type gpt2; kData (a malformed file) when it is not JSON, lacks a field
// or holds a field of the wrong JSON type ("n_embd": "768"), naming the field and the type expected.
Gpt2Config read_gpt2_config(const std::string& dir, const std::string& what);
// Refuses (kUsage), naming `what` and the first differing field, a config whose model is not the
// one `o` builds: "model.init_from X: n_layer is 2 in config.json, 4 in the config".
void check_gpt2_config_fits(const Gpt2Config& c, const model::GptOptions& o, const std::string& what);

}  // namespace ht::interop
