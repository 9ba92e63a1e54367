// The recompute primitive: a custom autograd Function that keeps only a segment's input, the RNG
// and autocast state, and recomputes the segment in backward. The segment's parameters are passed
// as Function inputs so autograd routes their gradients (this is what makes it work with
// torch::autograd::grad as well as backward()).
#include <fmt/ranges.h>

#include "core/error.h"
#include "recompute/recompute.h"
#include "recompute/state.h"

namespace ht::recompute {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SegmentState : detail::CountedState {
  SegmentFn fn;
  bool replay_rng = true;
  detail::RngSnapshot rng;
  detail::AutocastSnapshot autocast;
  std::vector<int64_t> out_sizes;
  at::ScalarType out_dtype = at::kFloat;
  c10::Device out_device{c10::kCPU};
};

void check_same_output(const SegmentState& s, const torch::Tensor& y) {
  HT_REQUIRE(y.defined(), ExitCode::kRuntime, "recompute: the recomputed segment returned an undefined tensor");
  HT_REQUIRE(y.sizes().vec() == s.out_sizes && y.scalar_type() == s.out_dtype && y.device() == s.out_device,
             ExitCode::kRuntime,
             "recompute: the recomputed segment returned {} {} on {} but the forward returned {} {} on {}; the "
             "segment must be deterministic in shape, dtype and device",
             fmt::format("[{}]", fmt::join(y.sizes(), ", ")), c10::toString(y.scalar_type()), y.device().str(),
             fmt::format("[{}]", fmt::join(s.out_sizes, ", ")), c10::toString(s.out_dtype), s.out_device.str());
}

// Gradients of y w.r.t. `wrt`; an input the graph does not reach is an error, never a silent zero.
variable_list grads_of(const torch::Tensor& y, const variable_list& wrt, const torch::Tensor& grad_y) {
  try {
    return torch::autograd::grad({y}, wrt, {grad_y}, /*retain_graph=*/false, /*create_graph=*/false,
                                 /*allow_unused=*/false);
  } catch (const c10::Error& e) {
    HT_FAIL(ExitCode::kRuntime,
            "recompute: cannot differentiate the recomputed segment w.r.t. its input and parameters (a parameter "
            "passed to recompute::run that the segment does not use?): {}",
            e.what_without_backtrace());
  }
}

struct SegmentFunction : torch::autograd::Function<SegmentFunction> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<SegmentState> state, const torch::Tensor& x,
                               at::TensorList params) {
    if (state->replay_rng) state->rng = detail::RngSnapshot::capture();
    state->autocast = detail::AutocastSnapshot::capture();
    torch::Tensor y = state->fn(x);
    HT_REQUIRE(y.defined(), ExitCode::kRuntime, "recompute: the segment returned an undefined tensor");
    state->out_sizes = y.sizes().vec();
    state->out_dtype = y.scalar_type();
    state->out_device = y.device();
    variable_list to_save{x};
    to_save.insert(to_save.end(), params.begin(), params.end());
    ctx->save_for_backward(to_save);  // params too: an in-place update before backward is detected
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = detail::take_state<SegmentState>(ctx, "segment");
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    torch::Tensor xd = x.detach();
    xd.requires_grad_(x.requires_grad());
    torch::Tensor y;
    {
      std::optional<detail::RngReplayScope> rng;
      if (state->replay_rng) rng.emplace(state->rng);
      detail::AutocastReplayScope autocast(state->autocast);
      torch::AutoGradMode grad_on(true);
      y = state->fn(xd);
    }
    check_same_output(*state, y);

    variable_list wrt;
    std::vector<size_t> slot;  // output position of each entry of wrt
    if (xd.requires_grad()) wrt.push_back(xd), slot.push_back(1);
    for (size_t i = 1; i < saved.size(); ++i)
      if (saved[i].requires_grad()) wrt.push_back(saved[i]), slot.push_back(i + 1);
    variable_list out(saved.size() + 1);  // [state (not a tensor), x, params...]
    if (wrt.empty()) return out;
    HT_REQUIRE(y.requires_grad(), ExitCode::kRuntime,
               "recompute: the recomputed segment output does not require grad although its input or parameters do");
    const variable_list g = grads_of(y, wrt, grad_outputs[0]);
    for (size_t i = 0; i < g.size(); ++i) out[slot[i]] = g[i];
    return out;
  }
};

}  // namespace

torch::Tensor run(const SegmentFn& fn, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                  const Options& opts) {
  HT_REQUIRE(x.defined(), ExitCode::kRuntime, "recompute::run: undefined input");
  auto state = c10::make_intrusive<SegmentState>();
  state->fn = fn;
  state->replay_rng = opts.replay_rng;
  return SegmentFunction::apply(std::move(state), x, at::TensorList(params))[0];
}

int64_t live_saved_states() { return detail::CountedState::live.load(); }

}  // namespace ht::recompute
