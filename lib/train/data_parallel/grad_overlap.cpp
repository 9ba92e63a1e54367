// Gradient buckets started from post-accumulate-grad hooks during backward (see grad_overlap.h).
#include "train/data_parallel/grad_overlap.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace ht::train {

namespace {

struct GradReadyHook final : torch::autograd::PostAccumulateGradHook {
  GradReadyHook(GradOverlap* owner, size_t index) : owner_(owner), index_(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { owner_->on_gradient(index_); }
  GradOverlap* owner_;
  size_t index_;
};

int64_t bucket_elems(int64_t bucket_bytes, comm::ExchangeDType dtype) {
  return bucket_bytes / (dtype == comm::ExchangeDType::kF32 ? 4 : 2);
}

}  // namespace

GradOverlap::GradOverlap(comm::Communicator& comm, comm::ParamAverager& grads, const std::vector<torch::Tensor>& params,
                         int64_t bucket_bytes, comm::ExchangeDType dtype)
    : grads_(grads),
      params_(params),
      reducer_(comm, grads.flat(), bucket_elems(bucket_bytes, dtype), dtype, "gradient buckets"),
      owner_(std::this_thread::get_id()) {
  buckets_of_.resize(params_.size());
  waiting_init_.assign(reducer_.num_buckets(), 0);
  int64_t offset = 0;
  size_t hooked = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t n = params_[i].numel();
    for (size_t b = 0; b < reducer_.num_buckets() && n > 0; ++b)
      if (reducer_.bucket_begin(b) < offset + n && offset < reducer_.bucket_end(b)) {
        buckets_of_[i].push_back(b);
        ++waiting_init_[b];
      }
    offset += n;
    if (n == 0) continue;
    auto& slot = torch::autograd::impl::post_acc_grad_hooks(params_[i]);
    if (slot) {
      // Someone else's hook: this parameter's buckets then start only in complete().
      HT_WARN("grad overlap: parameter {} already has a post-accumulate-grad hook; its buckets start after backward", i);
      for (size_t b : buckets_of_[i]) ++waiting_init_[b];  // never reaches zero from hooks
      buckets_of_[i].clear();
      continue;
    }
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<GradReadyHook>(this, i));
    ++hooked;
  }
  HT_REQUIRE(offset == grads_.numel(), ExitCode::kRuntime,
             "grad overlap: the parameters hold {} elements, the gradient buffer {}", offset, grads_.numel());
  waiting_ = waiting_init_;
  seen_.assign(params_.size(), 0);
  HT_INFO("comm: gradient all-reduce overlapped with backward: {} bucket(s) of up to {:.2f} MiB, {} parameter hooks",
          reducer_.num_buckets(), static_cast<double>(bucket_bytes) / (1 << 20), hooked);
}

GradOverlap::~GradOverlap() {
  for (auto& p : params_) {
    auto& slot = torch::autograd::impl::post_acc_grad_hooks(p);
    if (slot && dynamic_cast<GradReadyHook*>(slot.get()) != nullptr) slot.reset();
  }
}

void GradOverlap::arm() {
  armed_ = std::this_thread::get_id() == owner_;
  started_in_backward_ = 0;
  hook_seconds_ = 0.0;
}

void GradOverlap::on_gradient(size_t i) {
  if (!armed_ || seen_[i]) return;
  Stopwatch sw;
  // Only the thread that owns MPI may call it (MPI_THREAD_FUNNELED); only a gradient that lives in
  // the flat buffer is in the bucket. Otherwise nothing starts before complete().
  if (std::this_thread::get_id() != owner_ || !params_[i].grad().defined() || !grads_.is_bound(params_[i].grad(), i)) {
    armed_ = false;
    return;
  }
  seen_[i] = 1;
  for (size_t b : buckets_of_[i])
    if (--waiting_[b] == 0) {
      reducer_.start(b);
      ++started_in_backward_;
    }
  reducer_.progress();
  hook_seconds_ += sw.seconds();
}

void GradOverlap::complete() {
  armed_ = false;
  hook_seconds_ = 0.0;
  reducer_.finish();
  waiting_ = waiting_init_;
  std::fill(seen_.begin(), seen_.end(), 0);
}

}  // namespace ht::train
