// Per-step gradient averaging, blocking or overlapped with backward (see sync.h).
#include "train/data_parallel/sync.h"

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace ht::train {

comm::ExchangeDType exchange_dtype(config::ExchangeDtype t) {
  switch (t) {
    case config::ExchangeDtype::kBf16: return comm::ExchangeDType::kBF16;
    case config::ExchangeDtype::kFp16: return comm::ExchangeDType::kF16;
    case config::ExchangeDtype::kInt8: return comm::ExchangeDType::kI8;
    case config::ExchangeDtype::kInt4: return comm::ExchangeDType::kI4;
    case config::ExchangeDtype::kFp32: break;
    case config::ExchangeDtype::kAuto:
      throw Error(ExitCode::kUsage, "config key 'local_sgd.comm_dtype': auto is resolved with local_sgd.steps = auto "
                                    "(train::resolve_local_steps) before anything is exchanged");
  }
  return comm::ExchangeDType::kF32;
}

comm::ExchangeDType gradient_exchange_dtype(config::ExchangeDtype t) {
  const auto wire = exchange_dtype(t);
  return comm::is_quantized(wire) ? comm::ExchangeDType::kF32 : wire;
}

SyncAllReduce::SyncAllReduce(torch::nn::Module& model, comm::Communicator& comm, const config::Config& cfg,
                             std::shared_ptr<Optimizer> optimizer)
    : DataParallel(model, comm, sync_tensors_of(model, cfg.local_sgd.average_buffers)),
      cfg_(cfg.local_sgd),
      optimizer_(std::move(optimizer)) {
  for (auto& p : model.parameters())
    if (p.requires_grad()) trainable_.push_back(p);
  setup_overlap();
}

std::string SyncAllReduce::describe() const {
  return fmt::format("gradients averaged every step over {} ranks in {}{}", comm_.size(),
                     comm::to_string(exchange_options().dtype),
                     overlap_ ? fmt::format(", overlapped with backward in {} bucket(s)", overlap_->num_buckets())
                              : std::string(", one fused exchange after backward"));
}

comm::AveragerOptions SyncAllReduce::exchange_options() const {
  comm::AveragerOptions o;
  o.dtype = gradient_exchange_dtype(cfg_.comm_dtype);
  o.bucket_mb = cfg_.bucket_mb;
  o.name = "gradients";
  return o;
}

std::vector<torch::Tensor> SyncAllReduce::gradients() {
  std::vector<torch::Tensor> grads;
  grads.reserve(trainable_.size());
  for (auto& p : trainable_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // unused this step: contributes 0
    grads.push_back(p.grad());
  }
  return grads;
}

// Overlapped when it can run: several CPU ranks. The gradients are created now, zero, inside the
// flat buffer, so that the first step's hooks already find them there.
void SyncAllReduce::setup_overlap() {
  if (!cfg_.overlap_grad_allreduce || trainable_.empty() || comm_.size() == 1) return;
  if (!trainable_.front().device().is_cpu()) {
    HT_INFO("data parallel: overlap_grad_allreduce applies to CPU training; gradients on {} are averaged after "
            "backward", trainable_.front().device().str());
    return;
  }
  auto grads = gradients();
  grad_avg_ = std::make_unique<comm::ParamAverager>(comm_, grads, exchange_options());
  if (!grad_avg_->bind(grads)) {
    HT_WARN("data parallel: the gradients cannot live in one fp32 buffer; overlap_grad_allreduce is off");
    return;
  }
  constexpr int64_t kDefaultBucketBytes = int64_t{1} << 20;
  const int64_t bucket_bytes = cfg_.bucket_mb > 0 ? cfg_.bucket_mb << 20 : kDefaultBucketBytes;
  overlap_ = std::make_unique<GradOverlap>(comm_, *grad_avg_, trainable_, bucket_bytes, exchange_options().dtype);
}

void SyncAllReduce::before_backward(bool last_micro_batch) {
  if (last_micro_batch && overlap_) overlap_->arm();
}

void SyncAllReduce::after_backward() {
  if (overlap_)
    average_overlapped();
  else
    average_blocking();
  stats_.grad_allreduces += 1;
  stats_.bytes_per_grad_allreduce = grad_avg_->bytes_per_call();
  stats_.bytes_sent += grad_avg_->bytes_per_call();
  stats_.staged_transfers = grad_avg_->staged_transfers();
}

void SyncAllReduce::average_blocking() {
  Stopwatch sw;
  auto grads = gradients();
  if (!grad_avg_) grad_avg_ = std::make_unique<comm::ParamAverager>(comm_, grads, exchange_options());
  // Gradients that are not in the flat buffer yet (first step) move there now (one copy, the same
  // as a pack); ones already bound cost nothing.
  grad_avg_->bind(grads);
  grad_avg_->average(grads);
  stats_.comm_seconds += sw.seconds();
}

// The buckets the hooks started during backward are in flight; the rest start now. Gradients that
// left the buffer are copied back into it first.
void SyncAllReduce::average_overlapped() {
  Stopwatch sw;
  grad_avg_->bind(gradients());
  const double in_hooks = overlap_->hook_seconds();
  stats_.buckets_in_backward += static_cast<int64_t>(overlap_->started_in_backward());
  overlap_->complete();
  stats_.comm_seconds += sw.seconds() + in_hooks;
}

}  // namespace ht::train
