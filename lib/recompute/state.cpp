#include "recompute/state.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>

#include <mutex>

#include "core/error.h"

namespace ht::recompute::detail {

std::atomic<int64_t> CountedState::live{0};
CountedState::CountedState() { live.fetch_add(1); }
CountedState::~CountedState() { live.fetch_sub(1); }

namespace {
torch::Tensor get_state(const at::Generator& g) {
  at::Generator gen = g;
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void set_state(const at::Generator& g, const torch::Tensor& state) {
  at::Generator gen = g;
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}
}  // namespace

RngSnapshot RngSnapshot::capture() {
  RngSnapshot s;
  s.cpu = get_state(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
  if (torch::cuda::is_available()) {
    const auto n = static_cast<c10::DeviceIndex>(torch::cuda::device_count());
    for (c10::DeviceIndex i = 0; i < n; ++i)
      s.cuda.push_back(get_state(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i))));
  }
  return s;
}

void RngSnapshot::restore() const {
  if (cpu.defined()) set_state(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)), cpu);
  for (size_t i = 0; i < cuda.size(); ++i)
    set_state(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))),
              cuda[i]);
}

RngReplayScope::RngReplayScope(const RngSnapshot& replay) : saved_(RngSnapshot::capture()) { replay.restore(); }
RngReplayScope::~RngReplayScope() {
  try {
    saved_.restore();
  } catch (...) {  // a destructor must not throw; restoring a state we captured cannot fail in practice
  }
}

AutocastSnapshot AutocastSnapshot::capture() {
  AutocastSnapshot s;
  s.cpu_enabled = at::autocast::is_autocast_enabled(at::kCPU);
  s.cuda_enabled = at::autocast::is_autocast_enabled(at::kCUDA);
  s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  return s;
}

void AutocastSnapshot::apply() const {
  at::autocast::set_autocast_enabled(at::kCPU, cpu_enabled);
  at::autocast::set_autocast_enabled(at::kCUDA, cuda_enabled);
  at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
  at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
}

void check_backward_supported(torch::autograd::AutogradContext* ctx, const char* what) {
  HT_REQUIRE(!torch::GradMode::is_enabled(), ExitCode::kRuntime,
             "recompute ({}): create_graph=true (higher-order gradients) through a recomputed segment is not "
             "supported",
             what);
  HT_REQUIRE(ctx->saved_data.count("state") == 1, ExitCode::kRuntime,
             "recompute ({}): second backward through the same graph; retain_graph=true is not supported because "
             "the recompute state is released by the first backward",
             what);
}

}  // namespace ht::recompute::detail
