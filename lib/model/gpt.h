// GPT-style decoder (GPT-2 layout): token + position embeddings, N pre-norm blocks of causal
// self-attention (at::scaled_dot_product_attention) and a GELU MLP, final LayerNorm, LM head tied
// to the token embedding; plus a classification head over the mean-pooled final hidden states.
// The blocks are a list the model iterates through a BlockRunner, which is where activation
// recompute (lib/recompute) plugs in. An inference-only path (lm_logits_cached) keeps each block's
// keys and values of the positions seen so far, so generation costs one new position per token
// instead of the whole prefix again. This folder does no I/O.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "config/config.h"

namespace ht::model {

struct GptOptions {
  int64_t vocab_size = 258;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t d_model = 128;
  int64_t max_seq_len = 128;
  int64_t num_labels = 0;  // > 0 adds the classification head
  double dropout = 0.0;
  bool bias = true;
  config::AttentionKernel attention = config::AttentionKernel::kSdpa;  // auto is resolved before (kAuto = kSdpa)

  static GptOptions from_config(const config::ModelConfig& m);
};

// Keys and values of the positions processed so far, one pair per block ([B, n_head, T_past,
// head_dim] each); empty before the first call. Inference only: nothing here is differentiated.
struct KvCache {
  std::vector<torch::Tensor> k, v;
  int64_t length() const { return k.empty() ? 0 : k.front().size(2); }
};

// x through a Linear module as PyTorch's Python nn.Linear computes it (ATen's linear: the bias folded
// into one GEMM, addmm on the flattened input). The C++ frontend's own Linear::forward runs a 3-D
// input as matmul followed by an in-place bias add: a second pass over the output, and under bf16
// autocast an fp32 bias added into the bf16 output with a conversion each time.
inline torch::Tensor linear(const torch::nn::Linear& l, const torch::Tensor& x) {
  return at::linear(x, l->weight, l->bias);
}

// Causal self-attention of the packed projection qkv_out [B, T, 3C] with n_head heads, heads merged
// back: [B, T, C]. kSdpa calls at::scaled_dot_product_attention (on a CPU: the flash kernel, or the
// math path with dropout). kEager computes it as written, softmax(q k^T / sqrt(d) + causal mask) v,
// with the matmuls in the autocast dtype: on a CPU under bf16 autocast the flash kernel's backward is
// 1.5-3x slower than these matmuls up to 512 positions (docs/benchmarks.md), at the price of keeping
// the B x n_head x T^2 probabilities for backward. Same function up to rounding; dropout_p applies to
// the probabilities on both paths.
torch::Tensor causal_attention(const torch::Tensor& qkv_out, int64_t n_head, double dropout_p,
                               config::AttentionKernel kernel);

// The kernel model.attention = auto resolves to: eager for bf16 autocast on a CPU up to 512 positions,
// where it measured faster at every shape tried, sdpa otherwise (fp32 on a CPU, where the fused kernel
// was faster at every shape; CUDA, whose fused kernels never keep T^2 tensors; longer sequences).
// A fixed rule rather than a start-up measurement, so that two runs of one config compute the same.
config::AttentionKernel choose_attention(bool cuda, bool bf16_autocast, int64_t seq_len);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptOptions& o);
  torch::Tensor forward(const torch::Tensor& x);
  // The pieces, for recompute policies that keep some outputs and recompute others.
  torch::Tensor qkv_proj(const torch::Tensor& x) { return linear(qkv, x); }
  torch::Tensor attend(const torch::Tensor& qkv_out);  // causal_attention with this module's kernel
  torch::Tensor out_proj(const torch::Tensor& y);       // projection + residual dropout
  // x holds only the new positions; their keys/values are appended to k/v (empty = none yet).
  torch::Tensor forward_cached(const torch::Tensor& x, torch::Tensor& k, torch::Tensor& v);

  torch::nn::Linear qkv{nullptr}, proj{nullptr};
  torch::nn::Dropout resid_drop{nullptr};
  int64_t n_head;
  double attn_dropout;
  config::AttentionKernel kernel;
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const GptOptions& o);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear fc{nullptr}, proj{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GptOptions& o);
  // x + attn(ln1(x)), then + mlp(ln2(.))
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor forward_cached(const torch::Tensor& x, torch::Tensor& k, torch::Tensor& v);
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

// Runs block i on x. The default calls block->forward(x); lib/recompute installs others.
using BlockRunner = std::function<torch::Tensor(size_t index, Block& block, const torch::Tensor& x)>;

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptOptions& o);

  // Final hidden states [B, T, C] after ln_f.
  torch::Tensor hidden(const torch::Tensor& ids);
  // Next-token logits [B, T, V].
  torch::Tensor lm_logits(const torch::Tensor& ids);
  // Next-token logits [B, T_new, V] of new tokens ids [B, T_new] that follow the cache's positions;
  // appends their keys/values to the cache. Equal to lm_logits on the whole sequence (up to
  // rounding); bypasses the BlockRunner (nothing to recompute without autograd).
  torch::Tensor lm_logits_cached(const torch::Tensor& ids, KvCache& cache);
  // Class logits [B, num_labels]; mask [B, T] is 1 on real tokens, 0 on padding.
  torch::Tensor class_logits(const torch::Tensor& ids, const torch::Tensor& mask);

  void set_block_runner(BlockRunner runner) { runner_ = std::move(runner); }
  // The attention core every block computes with (kAuto = kSdpa); the cached inference path keeps SDPA.
  void set_attention(config::AttentionKernel kernel);
  const GptOptions& options() const { return opts_; }
  size_t num_blocks() const { return blocks_.size(); }
  Block& block(size_t i) { return blocks_[i]; }

  // Model FLOPs per trained token (forward + backward, 6N + attention), as in the PaLM appendix.
  double flops_per_token(int64_t seq_len) const;
  int64_t num_parameters() const;

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout emb_drop{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear cls_head{nullptr};

 private:
  void init_weights();
  GptOptions opts_;
  std::vector<Block> blocks_;
  torch::nn::ModuleList block_list_;
  BlockRunner runner_;
};
TORCH_MODULE(Gpt);

// Cross-entropy of next-token prediction: logits [B, T, V] vs targets [B, T] (mean over tokens).
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace ht::model
