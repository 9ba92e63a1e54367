// Internal to lib/recompute: the state a recompute node keeps between forward and backward
// (counted, for the leak tests), RNG snapshots of the CPU and CUDA generators, and autocast
// snapshots, each with a scope guard that restores what was current.
#pragma once
#include <torch/torch.h>

#include <atomic>
#include <optional>
#include <vector>

namespace ht::recompute::detail {

// Base of every saved state; its constructor/destructor maintain the live counter.
struct CountedState : torch::CustomClassHolder {
  CountedState();
  ~CountedState() override;
  CountedState(const CountedState&) = delete;
  CountedState& operator=(const CountedState&) = delete;
  static std::atomic<int64_t> live;
};

// The default CPU generator's state and, when CUDA is available, every device's.
struct RngSnapshot {
  torch::Tensor cpu;
  std::vector<torch::Tensor> cuda;
  static RngSnapshot capture();
  void restore() const;
};

// Sets `replay` for a scope and restores the state that was current on exit (also on exceptions).
class RngReplayScope {
 public:
  explicit RngReplayScope(const RngSnapshot& replay);
  ~RngReplayScope();
  RngReplayScope(const RngReplayScope&) = delete;
  RngReplayScope& operator=(const RngReplayScope&) = delete;

 private:
  RngSnapshot saved_;
};

struct AutocastSnapshot {
  bool cpu_enabled = false, cuda_enabled = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;
  static AutocastSnapshot capture();
  void apply() const;
  bool any_enabled() const { return cpu_enabled || cuda_enabled; }
};

class AutocastReplayScope {
 public:
  explicit AutocastReplayScope(const AutocastSnapshot& replay) : saved_(AutocastSnapshot::capture()) {
    replay.apply();
  }
  ~AutocastReplayScope() { saved_.apply(); }
  AutocastReplayScope(const AutocastReplayScope&) = delete;
  AutocastReplayScope& operator=(const AutocastReplayScope&) = delete;

 private:
  AutocastSnapshot saved_;
};

// Takes the state out of ctx->saved_data (so it is freed when backward ends); throws when it is
// gone (a second backward) or when grad mode is on (create_graph).
void check_backward_supported(torch::autograd::AutogradContext* ctx, const char* what);

template <typename State>
c10::intrusive_ptr<State> take_state(torch::autograd::AutogradContext* ctx, const char* what) {
  check_backward_supported(ctx, what);
  auto it = ctx->saved_data.find("state");
  auto holder = it->second.toCapsule();
  ctx->saved_data.erase(it);
  return c10::static_intrusive_pointer_cast<State>(std::move(holder));
}

}  // namespace ht::recompute::detail
