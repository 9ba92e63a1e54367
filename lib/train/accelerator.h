// Building blocks for hand-written loops (the Accelerate level): gradient accumulation as a
// scope, loss scaling in backward(), and whether this micro-step completes an optimizer step.
// Used with LrSchedule (train/optimizer/schedule.h) and a data-parallel strategy
// (train/data_parallel/data_parallel.h), which owns the optimizer. A hand-written loop gets the
// Trainer's allocator setting (train.retain_freed_memory) by calling memory::retain_freed_memory()
// (core/memory.h) once, as app/examples/custom_loop.cpp does.
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace ht::train {

class Accelerator {
 public:
  explicit Accelerator(int64_t grad_accum_steps);

  // RAII for one micro-batch (the C++ twin of `with accelerator.accumulate(model):`).
  class AccumulateScope {
   public:
    explicit AccumulateScope(Accelerator& a) : a_(a) {}
    ~AccumulateScope() { a_.micro_step_ = (a_.micro_step_ + 1) % a_.grad_accum_steps_; }
    AccumulateScope(const AccumulateScope&) = delete;
    AccumulateScope& operator=(const AccumulateScope&) = delete;

   private:
    Accelerator& a_;
  };

  AccumulateScope accumulate() { return AccumulateScope(*this); }
  // Scales the loss by 1 / grad_accum_steps so accumulated gradients equal one large batch.
  void backward(const torch::Tensor& loss);
  // True on the last micro-batch of an optimizer step: step, schedule and zero_grad now.
  bool sync_gradients() const { return micro_step_ == grad_accum_steps_ - 1; }
  int64_t grad_accum_steps() const { return grad_accum_steps_; }

 private:
  int64_t grad_accum_steps_;
  int64_t micro_step_ = 0;
};

}  // namespace ht::train
