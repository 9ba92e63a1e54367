// The per-step gradient all-reduce overlapped with backward, as DDP does it: the gradients live in
// one flat fp32 buffer (ParamAverager::bind), cut into buckets; a post-accumulate-grad hook on each
// parameter counts the gradients that are final, and a bucket's exchange starts (comm::BucketReducer)
// the moment its last parameter's gradient is. Backward runs roughly in reverse parameter order, so
// the last buckets start first and travel while the earlier layers' gradients are computed.
//
// The hooks act only after arm(), which the caller gives just before the backward of the last
// micro-batch of an optimizer step (earlier micro-batches only accumulate). complete(), after
// backward and before the optimizer step, starts whatever is left (parameters without a gradient
// this step, or a backward that was never armed), waits, and leaves the mean in the gradients.
// The values do not depend on when the buckets started (BucketReducer: rank-order sums), so an
// armed step and an unarmed one give the same bits. CPU tensors, hooks on the thread that called
// backward (libtorch runs CPU backward there); anything else falls back to starting at complete().
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "comm/bucket_reducer.h"
#include "comm/param_averager.h"

namespace ht::train {

class GradOverlap {
 public:
  // params: the parameters whose gradients `grads` averages, in its layout order; their gradients
  // must be bound to grads' flat buffer (ParamAverager::bind) whenever a step is armed.
  // bucket_bytes: of the exchange dtype.
  GradOverlap(comm::Communicator& comm, comm::ParamAverager& grads, const std::vector<torch::Tensor>& params,
              int64_t bucket_bytes, comm::ExchangeDType dtype);
  // Removes the hooks.
  ~GradOverlap();
  GradOverlap(const GradOverlap&) = delete;
  GradOverlap& operator=(const GradOverlap&) = delete;

  // The next backward is the last of this optimizer step: its hooks may start buckets.
  void arm();
  // Starts the buckets not started yet, completes every exchange: the gradients hold the mean.
  void complete();

  size_t num_buckets() const { return reducer_.num_buckets(); }
  // Buckets the hooks started during the last armed backward (telemetry and tests).
  size_t started_in_backward() const { return started_in_backward_; }
  // Seconds spent inside the hooks (start, progress) during the last armed backward.
  double hook_seconds() const { return hook_seconds_; }
  uint64_t bytes_per_round() const { return reducer_.bytes_per_round(); }

  // Called by the hook of parameter i after its gradient was accumulated.
  void on_gradient(size_t i);

 private:
  comm::ParamAverager& grads_;
  std::vector<torch::Tensor> params_;
  comm::BucketReducer reducer_;
  std::vector<std::vector<size_t>> buckets_of_;  // parameter -> the buckets its slice touches
  std::vector<int64_t> waiting_;                 // bucket -> parameters whose gradient is not final yet
  std::vector<int64_t> waiting_init_;
  std::vector<char> seen_;
  std::thread::id owner_;
  bool armed_ = false;
  size_t started_in_backward_ = 0;
  double hook_seconds_ = 0.0;
};

}  // namespace ht::train
