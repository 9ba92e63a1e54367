#include "train/train_step.h"

#include <ATen/autocast_mode.h>
#include <ATen/cpu/Utils.h>
#include <torch/nn/functional/loss.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/timer.h"

namespace ht::train {

AutocastScope::AutocastScope(config::Autocast mode, const torch::Device& device)
    : enabled_(mode == config::Autocast::kBf16), type_(device.type()) {
  if (!enabled_) return;
  prev_ = at::autocast::is_autocast_enabled(type_);
  prev_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, prev_);
  at::autocast::set_autocast_dtype(type_, prev_dtype_);
}

bool cpu_has_native_bf16() {
  const auto caps = at::cpu::get_cpu_capabilities();
  for (const char* key : {"avx512_bf16", "amx_bf16"}) {
    auto it = caps.find(key);
    if (it != caps.end() && it->second.isBool() && it->second.toBool()) return true;
  }
  return false;
}

torch::Tensor micro_batch_loss(model::Gpt& gpt, const data::Batch& batch, const torch::Device& device,
                               config::Autocast autocast) {
  AutocastScope scope(autocast, device);
  auto input = batch.input.to(device);
  auto target = batch.target.to(device);
  if (gpt->options().num_labels == 0) return model::lm_loss(gpt->lm_logits(input), target);
  auto logits = gpt->class_logits(input, batch.mask.to(device));
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), target);
}

AccumulatedLoss accumulate_gradients(model::Gpt& gpt, data::Loader& loader, int64_t grad_accum,
                                     const torch::Device& device, config::Autocast autocast, PhaseClock& clock,
                                     const std::function<void(bool last_micro_batch)>& before_backward,
                                     const std::function<void(bool losses_finite)>& losses_known) {
  AccumulatedLoss out;
  double loss_sum = 0.0;
  for (int64_t m = 0; m < grad_accum; ++m) {
    data::Batch batch;
    {
      PhaseClock::Scope data_wait(clock, Phase::kData);
      batch = loader.next();
    }
    out.tokens += batch.num_tokens;
    torch::Tensor loss;
    {
      PhaseClock::Scope forward(clock, Phase::kForward);
      loss = micro_batch_loss(gpt, batch, device, autocast);
      loss_sum += loss.item<double>();  // waits for the forward on a GPU, so the phases stay apart
    }
    const bool last = m == grad_accum - 1;
    if (last && losses_known) losses_known(std::isfinite(loss_sum));
    if (before_backward) before_backward(last);
    PhaseClock::Scope backward(clock, Phase::kBackward);
    (loss / static_cast<double>(grad_accum)).backward();
  }
  out.mean_loss = loss_sum / static_cast<double>(grad_accum);
  out.finite = std::isfinite(out.mean_loss);
  return out;
}

StepFlagAgreement::StepFlagAgreement(bool finite_here, comm::Communicator& comm)
    : flags_(comm, {!finite_here, signals::pending()}) {}

StepFlags StepFlagAgreement::wait(PhaseClock& clock) {
  PhaseClock::Scope phase(clock, Phase::kComm);
  const std::vector<bool> any = flags_.wait();
  return StepFlags{any[0], any[1]};
}

void maybe_inject_failure(int rank, int64_t step) {
  static const char* r = std::getenv("HPCTRAIN_TEST_FAIL_RANK");
  static const char* s = std::getenv("HPCTRAIN_TEST_FAIL_STEP");
  if (r && s && std::atoi(r) == rank && std::atoll(s) == step)
    HT_FAIL(ExitCode::kRuntime, "injected failure on rank {} at step {} (HPCTRAIN_TEST_FAIL_RANK/STEP)", rank, step);
}

void maybe_hold_for_signal(int64_t step) {
  static const char* at = std::getenv("HPCTRAIN_TEST_HOLD_AT_STEP");
  if (at == nullptr || std::atoll(at) != step || signals::pending()) return;
  const char* limit = std::getenv("HPCTRAIN_TEST_HOLD_TIMEOUT_S");
  const double timeout_s = limit != nullptr ? std::atof(limit) : 600.0;
  HT_INFO("holding at step {} until SIGTERM or SIGUSR1 arrives (HPCTRAIN_TEST_HOLD_AT_STEP)", step);
  Stopwatch sw;
  while (!signals::pending()) {
    HT_REQUIRE(sw.seconds() < timeout_s, ExitCode::kRuntime,
               "HPCTRAIN_TEST_HOLD_AT_STEP={}: no SIGTERM or SIGUSR1 within {} s (HPCTRAIN_TEST_HOLD_TIMEOUT_S)", step,
               timeout_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ht::train
