// Selective recompute: keep the matmul outputs, recompute the cheap ops. Two Functions beyond the
// segment primitive: CheapThenLinear (a norm or GELU followed by a Linear: only the cheap op's
// input is saved; backward recomputes the cheap op and applies the Linear's backward by hand,
// with the same ops autograd would use for at::linear, so gradients are bitwise equal in fp32;
// under autocast the same casts autograd would make: bf16 matmuls with fp32 accumulation, the
// gradients rounded to bf16 and converted back to the parameters' dtype), and MaskDropout (saves
// the RNG state instead of the dropout mask and regenerates the mask).
#include <ATen/ExpandUtils.h>

#include "core/error.h"
#include "model/gelu.h"
#include "recompute/recompute.h"
#include "recompute/state.h"

namespace ht::recompute {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CheapLinearState : detail::CountedState {
  SegmentFn cheap;
  size_t n_cheap_params = 0;
  bool has_bias = false;
  detail::AutocastSnapshot autocast;  // the forward's: replayed for the recompute, names the matmul dtype
};

// The dtype autocast gave the forward's linear on this device, or Undefined when it was off.
at::ScalarType lower_precision(const detail::AutocastSnapshot& a, const torch::Device& d) {
  if (d.is_cuda()) return a.cuda_enabled ? a.cuda_dtype : at::ScalarType::Undefined;
  return a.cpu_enabled ? a.cpu_dtype : at::ScalarType::Undefined;
}

// Linear backward as autograd computes it for at::linear on a contiguous [.., in] input:
// addmm(bias, a2d, W.t()) -> grad_a2d = gy2d.mm(W), grad_W = gy2d.t().mm(a2d), grad_b = sum_to(gy2d).
struct CheapThenLinear : torch::autograd::Function<CheapThenLinear> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<CheapLinearState> state,
                               const torch::Tensor& x, at::TensorList params) {
    // params = cheap params..., W[, b]
    const size_t nc = state->n_cheap_params;
    const torch::Tensor a = state->cheap(x);
    const torch::Tensor y = at::linear(a, params[nc], state->has_bias ? params[nc + 1] : torch::Tensor());
    variable_list to_save{x};
    to_save.insert(to_save.end(), params.begin(), params.end());
    ctx->save_for_backward(to_save);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = detail::take_state<CheapLinearState>(ctx, "selective norm/GELU + linear");
    const variable_list saved = ctx->get_saved_variables();
    const size_t nc = state->n_cheap_params;
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1 + nc];
    torch::Tensor xd = x.detach();
    xd.requires_grad_(x.requires_grad());
    torch::Tensor a;
    {
      torch::AutoGradMode grad_on(true);
      detail::AutocastReplayScope autocast(state->autocast);
      a = state->cheap(xd);
    }
    // Autocast ran the linear on copies of a and W in the lower precision: the matmuls of its
    // backward use those copies, and each gradient is converted back as its cast's backward does.
    const at::ScalarType lp = lower_precision(state->autocast, w.device());
    const bool low = lp != at::ScalarType::Undefined;
    const torch::Tensor wl = low ? w.to(lp) : w;
    const torch::Tensor gy2d = grad_outputs[0].reshape({-1, w.size(0)});
    const torch::Tensor a2d = low ? a.detach().reshape({-1, w.size(1)}).to(lp) : a.detach().reshape({-1, w.size(1)});
    variable_list out(saved.size() + 1);  // [state, x, cheap params..., W, b]
    if (w.requires_grad()) out[2 + nc] = gy2d.t().mm(a2d).to(w.scalar_type());
    if (state->has_bias && saved[2 + nc].requires_grad())
      out[3 + nc] = at::sum_to(gy2d, saved[2 + nc].sizes()).to(saved[2 + nc].scalar_type());

    variable_list wrt;
    std::vector<size_t> slot;
    if (xd.requires_grad()) wrt.push_back(xd), slot.push_back(1);
    for (size_t i = 1; i <= nc; ++i)
      if (saved[i].requires_grad()) wrt.push_back(saved[i]), slot.push_back(i + 1);
    if (wrt.empty()) return out;
    const torch::Tensor grad_a = gy2d.mm(wl).view(a.sizes()).to(a.scalar_type());
    const variable_list g = torch::autograd::grad({a}, wrt, {grad_a}, false, false, /*allow_unused=*/false);
    for (size_t i = 0; i < g.size(); ++i) out[slot[i]] = g[i];
    return out;
  }
};

struct MaskState : detail::CountedState {
  double p = 0.0;
  bool replay_rng = true;
  detail::RngSnapshot rng;
  std::vector<int64_t> sizes, strides;
  at::TensorOptions options;
};

// at::dropout on CPU is `x * empty_like(x).bernoulli_(1 - p).div_(1 - p)`: backward multiplies by
// the same noise, regenerated here from the RNG state saved before the forward.
struct MaskDropout : torch::autograd::Function<MaskDropout> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<MaskState> state, const torch::Tensor& x) {
    if (state->replay_rng) state->rng = detail::RngSnapshot::capture();
    state->sizes = x.sizes().vec();
    state->strides = x.strides().vec();
    state->options = x.options();
    torch::Tensor y = at::dropout(x, state->p, /*train=*/true);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = detail::take_state<MaskState>(ctx, "selective dropout mask");
    torch::Tensor noise;
    {
      std::optional<detail::RngReplayScope> rng;
      if (state->replay_rng) rng.emplace(state->rng);
      noise = at::empty_strided(state->sizes, state->strides, state->options);
      noise.bernoulli_(1.0 - state->p);
      noise.div_(1.0 - state->p);
    }
    return {torch::Tensor(), grad_outputs[0] * noise};
  }
};

torch::Tensor cheap_then_linear(SegmentFn cheap, const torch::Tensor& x, std::vector<torch::Tensor> cheap_params,
                                const torch::nn::Linear& linear) {
  auto state = c10::make_intrusive<CheapLinearState>();
  state->cheap = std::move(cheap);
  state->n_cheap_params = cheap_params.size();
  state->has_bias = linear->bias.defined();
  state->autocast = detail::AutocastSnapshot::capture();
  std::vector<torch::Tensor> params = std::move(cheap_params);
  params.push_back(linear->weight);
  if (state->has_bias) params.push_back(linear->bias);
  return CheapThenLinear::apply(std::move(state), x, at::TensorList(params))[0];
}

torch::Tensor mask_dropout(const torch::Tensor& x, torch::nn::Dropout drop, const Options& opts) {
  const double p = drop->options.p();
  // Identity or all-zero cases draw no random numbers: plain dropout keeps nothing worth dropping.
  if (!drop->is_training() || p <= 0.0 || p >= 1.0 || x.device().type() != c10::kCPU) return drop->forward(x);
  auto state = c10::make_intrusive<MaskState>();
  state->p = p;
  state->replay_rng = opts.replay_rng;
  return MaskDropout::apply(std::move(state), x)[0];
}

}  // namespace

torch::Tensor selective_block(model::Block& block, const torch::Tensor& x, const Options& opts) {
  auto& attn = block->attn;
  auto& mlp = block->mlp;
  auto ln1 = block->ln1.ptr(), ln2 = block->ln2.ptr();
  auto attn_mod = attn.ptr();
  torch::Tensor qkv = cheap_then_linear([ln1](const torch::Tensor& t) { return ln1->forward(t); }, x,
                                        ln1->parameters(), attn->qkv);
  torch::Tensor y = opts.recompute_attention_core
                        ? run([attn_mod](const torch::Tensor& t) { return attn_mod->attend(t); }, qkv, {}, opts)
                        : attn->attend(qkv);
  torch::Tensor h = x + mask_dropout(attn->proj->forward(y), attn->resid_drop, opts);
  torch::Tensor f = cheap_then_linear([ln2](const torch::Tensor& t) { return ln2->forward(t); }, h,
                                      ln2->parameters(), mlp->fc);
  torch::Tensor m = cheap_then_linear(model::gelu_tanh, f, {}, mlp->proj);
  return h + mask_dropout(m, mlp->drop, opts);
}

}  // namespace ht::recompute
