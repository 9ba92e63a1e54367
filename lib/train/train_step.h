// The forward/backward half of one optimizer step: micro-batches from the loader, the loss of
// each (LM or classification head) under the configured autocast, gradients accumulated with the
// 1 / grad_accum scale so they equal those of one batch grad_accum times larger.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <functional>

#include "comm/any_flags.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "data/batch.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "train/report/phases.h"

namespace ht::train {

// Autocast of the forward pass as train.autocast asks (bf16 on the device's type, CPU or CUDA),
// restored on scope exit. Leaving the outermost scope clears autocast's cache of low-precision
// weight copies, as torch.autocast does: the optimizer changes the weights before the next forward.
class AutocastScope {
 public:
  AutocastScope(config::Autocast mode, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_ = false;
  bool prev_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

// True when this CPU multiplies bf16 natively (ATen reports AVX512-BF16 or AMX-BF16).
bool cpu_has_native_bf16();

// Loss of one micro-batch (cross-entropy in fp32): next-token for causal-lm, label for classification.
torch::Tensor micro_batch_loss(model::Gpt& gpt, const data::Batch& batch, const torch::Device& device,
                               config::Autocast autocast);

struct AccumulatedLoss {
  double mean_loss = 0.0;  // mean over the micro-batches
  bool finite = true;
  int64_t tokens = 0;      // input tokens this rank consumed
};

// grad_accum micro-batches: forward, scaled backward; gradients accumulate into the parameters'.
// The clock gets the data wait, forward and backward time. losses_known (optional) runs once, after
// the last forward and before its backward, told whether the step's mean loss is finite (the
// Trainer starts the step-flag agreement there). before_backward (optional) runs before each
// backward, told whether it is the last micro-batch (the overlapped gradient buckets then start
// during that backward).
AccumulatedLoss accumulate_gradients(model::Gpt& gpt, data::Loader& loader, int64_t grad_accum,
                                     const torch::Device& device, config::Autocast autocast, PhaseClock& clock,
                                     const std::function<void(bool last_micro_batch)>& before_backward = {},
                                     const std::function<void(bool losses_finite)>& losses_known = {});

// The one tiny exchange per step: whether any rank saw a non-finite loss or has a signal pending
// (core/signals.h), so every rank takes the same branch at the same step. It starts as soon as the
// step's losses are known, after the last forward, and completes after the gradient exchange
// (comm::AnyFlags: the other ranks' flags are there by then, whenever they were sent): the backward
// runs in between, so a rank up to one backward behind the others costs them no wait. Local SGD's
// steps between exchanges have no other collective; a blocking agreement there made every rank
// wait for the slowest one at every step. wait() counts as communication time (the caller times
// the start). comm: a communicator of the agreement's own (comm::AnyFlags).
struct StepFlags {
  bool any_nonfinite = false;
  bool any_signal = false;
};
class StepFlagAgreement {
 public:
  StepFlagAgreement(bool finite_here, comm::Communicator& comm);
  StepFlags wait(PhaseClock& clock);

 private:
  comm::AnyFlags flags_;
};

// Test hook (documented in docs/config.md): HPCTRAIN_TEST_FAIL_RANK=R and HPCTRAIN_TEST_FAIL_STEP=S
// make rank R throw at step S, to prove that a failing rank ends the whole job without a hang.
void maybe_inject_failure(int rank, int64_t step);
// Test hook (docs/config.md): HPCTRAIN_TEST_HOLD_AT_STEP=S makes every rank stop before the signal
// check of step S, print "holding at step S" once, and wait there until SIGTERM or SIGUSR1
// arrives (at most HPCTRAIN_TEST_HOLD_TIMEOUT_S seconds, default 600, then an error naming the
// hook). A signal test then sends its signal after that line, and the signal is seen at step S
// exactly, however fast the machine: no test races the clock.
void maybe_hold_for_signal(int64_t step);

}  // namespace ht::train
