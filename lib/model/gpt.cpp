#include "model/gpt.h"

#include <cmath>
#include <optional>
#include <utility>

#include "core/error.h"
#include "model/causal_softmax.h"
#include "model/gelu.h"

namespace ht::model {

namespace {
// The kernel a block runs: auto not resolved (inference tools, tests) means SDPA.
config::AttentionKernel runnable(config::AttentionKernel k) {
  return k == config::AttentionKernel::kEager ? k : config::AttentionKernel::kSdpa;
}
}  // namespace

GptOptions GptOptions::from_config(const config::ModelConfig& m) {
  GptOptions o;
  o.vocab_size = m.vocab_size;
  o.n_layer = m.n_layer;
  o.n_head = m.n_head;
  o.d_model = m.d_model;
  o.max_seq_len = m.max_seq_len > 0 ? m.max_seq_len : m.seq_len;
  o.num_labels = m.task == config::Task::kClassification ? m.num_labels : 0;
  o.dropout = m.dropout;
  o.bias = m.bias;
  o.attention = runnable(m.attention);
  return o;
}

namespace {
torch::nn::LayerNorm make_norm(const GptOptions& o) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model}).eps(1e-5).elementwise_affine(true));
}
}  // namespace

torch::Tensor causal_attention(const torch::Tensor& qkv_out, int64_t n_head, double dropout_p,
                               config::AttentionKernel kernel) {
  const auto B = qkv_out.size(0), T = qkv_out.size(1), C = qkv_out.size(2) / 3;
  auto parts = qkv_out.split(C, /*dim=*/2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
  torch::Tensor y;
  if (kernel == config::AttentionKernel::kEager) {
    // The scale goes on q ([B, H, T, d]) rather than on the scores ([B, H, T, T]): fewer values when T > d.
    const double scale = 1.0 / std::sqrt(static_cast<double>(C / n_head));
    auto scores = at::matmul(heads(parts[0]) * scale, heads(parts[1]).transpose(-2, -1));
    auto probs = causal_softmax(std::move(scores));
    if (dropout_p > 0.0) probs = at::dropout(probs, dropout_p, /*train=*/true);
    y = at::matmul(probs, heads(parts[2]));
  } else {
    y = at::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), /*attn_mask=*/{}, dropout_p,
                                         /*is_causal=*/true);
  }
  return y.transpose(1, 2).contiguous().view({B, T, C});
}

config::AttentionKernel choose_attention(bool cuda, bool bf16_autocast, int64_t seq_len) {
  constexpr int64_t kEagerMaxPositions = 512;  // 1024 positions: the fused kernel was 6 % faster
  return !cuda && bf16_autocast && seq_len <= kEagerMaxPositions ? config::AttentionKernel::kEager
                                                                 : config::AttentionKernel::kSdpa;
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptOptions& o)
    : n_head(o.n_head), attn_dropout(o.dropout), kernel(o.attention) {
  qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(o.d_model, 3 * o.d_model).bias(o.bias)));
  proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(o.d_model, o.d_model).bias(o.bias)));
  resid_drop = register_module("resid_drop", torch::nn::Dropout(o.dropout));
}

torch::Tensor CausalSelfAttentionImpl::attend(const torch::Tensor& qkv_out) {
  return causal_attention(qkv_out, n_head, is_training() ? attn_dropout : 0.0, kernel);
}

torch::Tensor CausalSelfAttentionImpl::forward_cached(const torch::Tensor& x, torch::Tensor& k, torch::Tensor& v) {
  const auto B = x.size(0), T = x.size(1), C = x.size(2);
  auto parts = qkv_proj(x).split(C, /*dim=*/2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
  const int64_t past = k.defined() ? k.size(2) : 0;
  k = past == 0 ? heads(parts[1]) : torch::cat({k, heads(parts[1])}, 2);
  v = past == 0 ? heads(parts[2]) : torch::cat({v, heads(parts[2])}, 2);
  // New query i sits at position past + i and may see keys 0..past + i: no mask for a single new
  // token, the plain causal mask without a past, an offset lower triangle otherwise.
  std::optional<torch::Tensor> mask;
  if (past > 0 && T > 1)
    mask = torch::ones({T, past + T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).tril(past);
  auto y = at::scaled_dot_product_attention(heads(parts[0]), k, v, mask, 0.0, /*is_causal=*/past == 0 && T > 1);
  return out_proj(y.transpose(1, 2).contiguous().view({B, T, C}));
}

torch::Tensor CausalSelfAttentionImpl::out_proj(const torch::Tensor& y) { return resid_drop->forward(linear(proj, y)); }

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) { return out_proj(attend(qkv_proj(x))); }

MlpImpl::MlpImpl(const GptOptions& o) {
  fc = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(o.d_model, 4 * o.d_model).bias(o.bias)));
  proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(4 * o.d_model, o.d_model).bias(o.bias)));
  drop = register_module("drop", torch::nn::Dropout(o.dropout));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return drop->forward(linear(proj, gelu_tanh(linear(fc, x))));
}

BlockImpl::BlockImpl(const GptOptions& o) {
  ln1 = register_module("ln1", make_norm(o));
  attn = register_module("attn", CausalSelfAttention(o));
  ln2 = register_module("ln2", make_norm(o));
  mlp = register_module("mlp", Mlp(o));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto h = x + attn->forward(ln1->forward(x));
  return h + mlp->forward(ln2->forward(h));
}

torch::Tensor BlockImpl::forward_cached(const torch::Tensor& x, torch::Tensor& k, torch::Tensor& v) {
  auto h = x + attn->forward_cached(ln1->forward(x), k, v);
  return h + mlp->forward(ln2->forward(h));
}

GptImpl::GptImpl(const GptOptions& o) : opts_(o) {
  HT_REQUIRE(o.vocab_size > 0, ExitCode::kUsage, "model.vocab_size must be > 0");
  HT_REQUIRE(o.d_model % o.n_head == 0, ExitCode::kUsage, "model.n_head {} does not divide model.d_model {}", o.n_head,
             o.d_model);
  wte = register_module("wte", torch::nn::Embedding(o.vocab_size, o.d_model));
  wpe = register_module("wpe", torch::nn::Embedding(o.max_seq_len, o.d_model));
  emb_drop = register_module("emb_drop", torch::nn::Dropout(o.dropout));
  block_list_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.n_layer; ++i) {
    blocks_.emplace_back(o);
    block_list_->push_back(blocks_.back());
  }
  ln_f = register_module("ln_f", make_norm(o));
  if (o.num_labels > 0) cls_head = register_module("cls_head", torch::nn::Linear(o.d_model, o.num_labels));
  runner_ = [](size_t, Block& b, const torch::Tensor& x) { return b->forward(x); };
  init_weights();
}

void GptImpl::init_weights() {
  torch::NoGradGuard no_grad;
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(opts_.n_layer));
  for (auto& p : named_parameters()) {
    const auto& name = p.key();
    auto& t = p.value();
    const bool is_norm = name.find("ln") != std::string::npos;
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      t.zero_();
    } else if (is_norm) {
      t.fill_(1.0);
    } else if (name.find(".proj.weight") != std::string::npos) {
      t.normal_(0.0, resid_std);  // GPT-2: residual projections scaled by 1/sqrt(2 * n_layer)
    } else {
      t.normal_(0.0, 0.02);
    }
  }
}

void GptImpl::set_attention(config::AttentionKernel kernel) {
  opts_.attention = runnable(kernel);
  for (auto& b : blocks_) b->attn->kernel = opts_.attention;
}

torch::Tensor GptImpl::hidden(const torch::Tensor& ids) {
  const auto T = ids.size(1);
  HT_REQUIRE(T <= opts_.max_seq_len, ExitCode::kUsage, "sequence of {} tokens exceeds model.max_seq_len = {}", T,
             opts_.max_seq_len);
  auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(ids.device()));
  auto x = emb_drop->forward(wte->forward(ids) + wpe->forward(pos));
  for (size_t i = 0; i < blocks_.size(); ++i) x = runner_(i, blocks_[i], x);
  return ln_f->forward(x);
}

torch::Tensor GptImpl::lm_logits(const torch::Tensor& ids) {
  return at::linear(hidden(ids), wte->weight);  // tied head
}

torch::Tensor GptImpl::lm_logits_cached(const torch::Tensor& ids, KvCache& cache) {
  const int64_t past = cache.length(), T = ids.size(1);
  HT_REQUIRE(past + T <= opts_.max_seq_len, ExitCode::kUsage, "{} cached + {} new positions exceed model.max_seq_len = {}",
             past, T, opts_.max_seq_len);
  if (cache.k.empty()) {
    cache.k.resize(blocks_.size());
    cache.v.resize(blocks_.size());
  }
  auto pos = torch::arange(past, past + T, torch::TensorOptions().dtype(torch::kLong).device(ids.device()));
  auto x = emb_drop->forward(wte->forward(ids) + wpe->forward(pos));
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward_cached(x, cache.k[i], cache.v[i]);
  return at::linear(ln_f->forward(x), wte->weight);
}

torch::Tensor GptImpl::class_logits(const torch::Tensor& ids, const torch::Tensor& mask) {
  HT_REQUIRE(cls_head, ExitCode::kUsage, "classification head requested but model.num_labels = 0");
  auto h = hidden(ids);
  auto m = mask.to(h.dtype()).unsqueeze(-1);
  auto pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0);
  return linear(cls_head, pooled);
}

double GptImpl::flops_per_token(int64_t seq_len) const {
  // Non-embedding parameters: 12 * L * d^2 (+ LM head d * V); attention scores: 12 * L * d * T (fwd+bwd).
  const double L = static_cast<double>(opts_.n_layer), d = static_cast<double>(opts_.d_model);
  const double n_matmul_params = 12.0 * L * d * d + d * static_cast<double>(opts_.vocab_size);
  return 6.0 * n_matmul_params + 12.0 * L * d * static_cast<double>(seq_len);
}

int64_t GptImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                                              targets.reshape({-1}));
}

}  // namespace ht::model
