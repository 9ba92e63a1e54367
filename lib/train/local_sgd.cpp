// LocalSgd: synchronous gradient averaging (baseline, warmup), then parameter averaging every N
// local steps (plain or DiLoCo outer step), optionally overlapped, with drift and consistency telemetry.
#include "train/local_sgd.h"

#include <cmath>
#include <exception>

#include "comm/agree.h"
#include "comm/param_averager.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/timer.h"
#include "train/local_sgd_impl.h"

namespace ht::train {

namespace detail {

comm::ExchangeDType exchange_dtype(config::ExchangeDtype t) {
  switch (t) {
    case config::ExchangeDtype::kBf16: return comm::ExchangeDType::kBF16;
    case config::ExchangeDtype::kFp16: return comm::ExchangeDType::kF16;
    case config::ExchangeDtype::kFp32: break;
  }
  return comm::ExchangeDType::kF32;
}

void outer_update(torch::Tensor& global, torch::Tensor& momentum, const torch::Tensor& g,
                  const config::LocalSgdConfig& cfg) {
  const double mu = cfg.outer_momentum;
  if (mu > 0) {
    momentum.mul_(mu).add_(g);
    if (cfg.nesterov)
      global.sub_(g + mu * momentum, cfg.outer_lr);
    else
      global.sub_(momentum, cfg.outer_lr);
  } else {
    global.sub_(g, cfg.outer_lr);
  }
}

}  // namespace detail

namespace {

std::string describe(const torch::Tensor& t) {
  std::string out = c10::toString(t.scalar_type());
  for (auto d : t.sizes()) out += fmt::format("x{}", d);
  return out;
}

// Hash of (names, shapes, dtypes) and of the local_sgd settings every rank must share; the
// allgather tells each rank which ranks differ from rank 0, and every rank throws the same error.
void verify_same_model(comm::Communicator& comm, torch::nn::Module& model, const config::LocalSgdConfig& c) {
  uint64_t h = kFnvOffset;
  int64_t n = 0;
  for (const auto& p : model.named_parameters()) h = fnv1a(h, "p:" + p.key() + ":" + describe(p.value())), ++n;
  for (const auto& b : model.named_buffers()) h = fnv1a(h, "b:" + b.key() + ":" + describe(b.value())), ++n;
  h = fnv1a(h, fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", c.enabled, c.steps, c.warmup_steps, c.average_buffers,
                                 config::name_of(c.optimizer_state), config::name_of(c.outer),
                                 config::name_of(c.comm_dtype), c.overlap_steps, c.bucket_mb,
                                 c.overlap_grad_allreduce));
  const comm::Disagreement d = comm::compare_with_root(comm, h);
  HT_REQUIRE(d.ranks.empty(), ExitCode::kUsage,
             "local_sgd: rank(s) {} disagree with rank 0 on the model shape or local_sgd settings "
             "(hash of parameter names/shapes/dtypes and config differs; this rank has {} tensors, hash {:016x})",
             d.list(false), n, h);
}

// Optimizer moments that optimizer_state = average synchronises (Adam/AdamW moments, SGD momentum).
std::vector<torch::Tensor> optimizer_moments(torch::optim::Optimizer& opt) {
  std::vector<torch::Tensor> out;
  auto add = [&](const torch::Tensor& t) {
    if (t.defined() && t.numel() > 0 && t.is_floating_point()) out.push_back(t);
  };
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) {
      auto it = opt.state().find(p.unsafeGetTensorImpl());
      if (it == opt.state().end()) continue;
      if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
        add(s->exp_avg()), add(s->exp_avg_sq()), add(s->max_exp_avg_sq());
      } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
        add(a->exp_avg()), add(a->exp_avg_sq()), add(a->max_exp_avg_sq());
      } else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
        add(m->momentum_buffer());
      }
    }
  return out;
}

}  // namespace


void LocalSgd::Impl::average_grads() {
  Stopwatch sw;
  std::vector<torch::Tensor> grads;
  grads.reserve(trainable.size());
  for (auto& p : trainable) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // unused this step: contributes 0
    grads.push_back(p.grad());
  }
  if (!grad_avg) grad_avg = std::make_unique<comm::ParamAverager>(comm, grads, averager_options("gradients"));
  // Gradients that are not in the flat buffer yet (first step, or freed by zero_grad(true)) move
  // there now (one copy, the same as a pack); ones already bound cost nothing.
  grads_bound = grad_avg->bind(grads);
  grad_avg->average(grads);
  stats.grad_allreduces += 1;
  stats.bytes_per_grad_allreduce = grad_avg->bytes_per_call();
  stats.bytes_sent += grad_avg->bytes_per_call();
  stats.comm_seconds += sw.seconds();
}

// Overlapped per-step gradient averaging (train/grad_overlap.h) when it can run: gradients of
// every step averaged (enabled = false, or a warmup), several CPU ranks. The gradients are
// created now, zero, inside the flat buffer, so that the first step's hooks already find them there.
void LocalSgd::Impl::setup_grad_overlap() {
  if (!cfg.overlap_grad_allreduce || (cfg.enabled && cfg.warmup_steps == 0) || trainable.empty() || comm.size() == 1)
    return;
  if (!trainable.front().device().is_cpu()) {
    HT_INFO("local_sgd: overlap_grad_allreduce applies to CPU training; gradients on {} are averaged after backward",
            trainable.front().device().str());
    return;
  }
  std::vector<torch::Tensor> grads;
  for (auto& p : trainable) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  grad_avg = std::make_unique<comm::ParamAverager>(comm, grads, averager_options("gradients"));
  grads_bound = grad_avg->bind(grads);
  if (!grads_bound) return;
  constexpr int64_t kDefaultBucketBytes = int64_t{1} << 20;
  const int64_t bucket_bytes = cfg.bucket_mb > 0 ? cfg.bucket_mb << 20 : kDefaultBucketBytes;
  grad_overlap = std::make_unique<GradOverlap>(comm, *grad_avg, trainable, bucket_bytes, detail::exchange_dtype(cfg.comm_dtype));
}

// The buckets the hooks started during backward are in flight; the rest start now. Gradients freed
// by zero_grad(true) (a skipped step) are copied back into the buffer first.
void LocalSgd::Impl::average_grads_overlapped() {
  Stopwatch sw;
  std::vector<torch::Tensor> grads;
  grads.reserve(trainable.size());
  for (auto& p : trainable) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  grads_bound = grad_avg->bind(grads);
  const double in_hooks = grad_overlap->hook_seconds();
  grad_overlap->complete();
  stats.grad_allreduces += 1;
  stats.bytes_per_grad_allreduce = grad_avg->bytes_per_call();
  stats.bytes_sent += grad_avg->bytes_per_call();
  stats.comm_seconds += sw.seconds() + in_hooks;
}

// Packs the local values, keeps them as the snapshot, turns them into the DiLoCo pseudo-gradient
// (global - local) when needed, and starts (overlap) or completes (blocking) the mean.
void LocalSgd::Impl::begin_sync(bool blocking) {
  Stopwatch sw;
  auto& flat = state_avg->flat();
  state_avg->pack(sync_set);
  snapshot.copy_(flat);
  if (diloco) flat.neg_().add_(global);
  stats.syncs += 1;
  stats.bytes_last_sync = state_avg->bytes_per_call();
  stats.bytes_sent += state_avg->bytes_per_call();
  since_sync = 0;
  if (blocking) {
    state_avg->allreduce_mean();
    stats.comm_seconds += sw.seconds();
    complete_sync(false);
  } else {
    state_avg->start_mean();
    pending = true;
    mean_ready = false;
    pending_age = 0;
    stats.comm_seconds += sw.seconds();
  }
}

// |p_r - mean|^2 of this rank's snapshot: plain averaging has mean in flat; DiLoCo has the mean
// pseudo-gradient g there, and p_r - mean(p) = g - (global - p_r).
double LocalSgd::Impl::local_drift_squared() const {
  const auto& flat = state_avg->flat();
  auto diff = diloco ? (global - snapshot).sub_(flat) : snapshot - flat;
  return diff.square().sum(torch::kDouble).item<double>();
}

// DiLoCo outer step on the global copy with the averaged pseudo-gradient (in flat).
void LocalSgd::Impl::outer_step() { detail::outer_update(global, momentum, state_avg->flat(), cfg); }

// Completes the transfer of an overlapped average (the result stays in flat until it is applied).
void LocalSgd::Impl::await_mean() {
  if (mean_ready) return;
  Stopwatch sw;
  state_avg->wait_mean();
  mean_ready = true;
  stats.comm_seconds += sw.seconds();
}

void LocalSgd::Impl::average_moments() {
  auto moments = optimizer_moments(optimizer);
  if (moments.empty()) return;  // before the first optimizer step, or an optimizer without moments
  if (!moment_avg) moment_avg = std::make_unique<comm::ParamAverager>(comm, moments, averager_options("optimizer moments"));
  moment_avg->average(moments);
  stats.bytes_last_sync += moment_avg->bytes_per_call();
  stats.bytes_sent += moment_avg->bytes_per_call();
}

// The mean is in flat. Measures drift, forms the target (mean, or DiLoCo's new global copy),
// applies it (overlapped: target + local progress since the snapshot), checks replicas agree.
void LocalSgd::Impl::complete_sync(bool overlapped) {
  Stopwatch sw;
  const double drift_sq = comm.allreduce_sum(local_drift_squared());
  stats.last_drift = std::sqrt(drift_sq / comm.size());
  if (diloco) outer_step();
  auto& target = diloco ? global : state_avg->flat();
  const std::string what = fmt::format("local SGD sync {} at step {}", stats.syncs, stats.steps);
  if (overlapped) {
    // The target itself must agree bitwise; params differ by each rank's own k local steps.
    const uint64_t sum = comm::checksum({target});
    if (cfg.consistency_check) comm::verify_replicas_equal(comm, sum, what + " (averaged snapshot)");
    stats.last_checksum = sum;
    auto delta = target - snapshot;
    state_avg->unpack(sync_set, delta, /*add=*/true);
    if (hook) hook();
  } else {
    state_avg->unpack(sync_set, target);
    if (hook) hook();
    stats.last_checksum = comm::checksum(sync_set);
    if (cfg.consistency_check) comm::verify_replicas_equal(comm, stats.last_checksum, what);
  }
  if (cfg.optimizer_state == config::OptimizerState::kAverage) average_moments();
  pending = false;
  mean_ready = false;
  stats.comm_seconds += sw.seconds();
  stats.last_sync_seconds = sw.seconds();
  HT_DEBUG("local_sgd: sync {} at step {}: drift {:.4e}, {} bytes, checksum {:016x}", stats.syncs, stats.steps,
           stats.last_drift, stats.bytes_last_sync, stats.last_checksum);
}

LocalSgd::LocalSgd(torch::nn::Module& model, torch::optim::Optimizer& optimizer, comm::Communicator& comm,
                   const config::LocalSgdConfig& cfg)
    : impl_(std::make_unique<Impl>(model, optimizer, comm, cfg)) {
  HT_REQUIRE(cfg.steps >= 1, ExitCode::kUsage, "local_sgd.steps = {} must be >= 1", cfg.steps);
  HT_REQUIRE(cfg.warmup_steps >= 0, ExitCode::kUsage, "local_sgd.warmup_steps = {} must be >= 0", cfg.warmup_steps);
  HT_REQUIRE(cfg.overlap_steps >= 0 && (cfg.overlap_steps == 0 || cfg.overlap_steps < cfg.steps), ExitCode::kUsage,
             "local_sgd.overlap_steps = {} must be in [0, local_sgd.steps = {})", cfg.overlap_steps, cfg.steps);
  auto& s = *impl_;
  verify_same_model(comm, model, cfg);
  for (auto& p : model.parameters()) {
    s.sync_set.push_back(p);
    if (p.requires_grad()) s.trainable.push_back(p);
  }
  std::vector<torch::Tensor> float_buffers;
  for (auto& b : model.buffers())
    if (b.is_floating_point()) float_buffers.push_back(b);
  // Identical start: rank 0's parameters and buffers everywhere.
  comm::broadcast_tensors(comm, s.sync_set, 0);
  comm::broadcast_tensors(comm, float_buffers, 0);
  if (cfg.average_buffers) s.sync_set.insert(s.sync_set.end(), float_buffers.begin(), float_buffers.end());
  if (cfg.enabled && !s.sync_set.empty()) {
    s.state_avg = std::make_unique<comm::ParamAverager>(comm, s.sync_set, s.averager_options("parameters"));
    s.snapshot = torch::zeros_like(s.state_avg->flat());
    // Blocking plain averaging: the parameters live in the averager's flat buffer (no pack/unpack
    // per sync, one copy of the parameters less). Overlap and DiLoCo keep their own data in that
    // buffer while training goes on, so they keep separate parameter storage.
    const bool bound = !s.diloco && cfg.overlap_steps == 0 && s.state_avg->bind(s.sync_set);
    HT_INFO("local_sgd: parameters {}", bound ? "stored in the flat exchange buffer (no pack/unpack per sync)"
                                             : "packed into the exchange buffer at each sync");
    if (s.diloco) {
      s.global = torch::zeros_like(s.snapshot);
      s.momentum = torch::zeros_like(s.snapshot);
      s.reset_outer();
    }
  }
  s.setup_grad_overlap();
  HT_INFO("local_sgd: {} on {} ranks{}", cfg.enabled ? fmt::format("every {} local steps", cfg.steps)
                                                     : std::string("off (gradient all-reduce every step)"),
          comm.size(),
          cfg.enabled ? fmt::format(", warmup {} synchronous steps, outer {}, exchange {}, overlap {} steps",
                                    cfg.warmup_steps, config::name_of(cfg.outer), config::name_of(cfg.comm_dtype),
                                    cfg.overlap_steps)
                      : std::string());
}

LocalSgd::~LocalSgd() {
  if (!impl_) return;
  if (std::uncaught_exceptions() > 0) {
    // Unwinding from an error: other ranks may not reach a collective, so do not start one.
    if (!impl_->finished) HT_WARN("local_sgd: final average skipped while unwinding from an error");
    return;
  }
  try {
    finish();
  } catch (const std::exception& e) {
    HT_ERROR("local_sgd: final average in destructor failed: {}", e.what());
  } catch (...) {
    HT_ERROR("local_sgd: final average in destructor failed (unknown exception)");
  }
}

void LocalSgd::before_backward(bool last_micro_batch) {
  if (last_micro_batch && impl_->grad_overlap && impl_->synchronous_now()) impl_->grad_overlap->arm();
}

void LocalSgd::after_backward() {
  if (!impl_->synchronous_now()) return;
  if (impl_->grad_overlap)
    impl_->average_grads_overlapped();
  else
    impl_->average_grads();
}

bool LocalSgd::keep_gradients() const { return impl_->grads_bound && impl_->synchronous_now(); }

void LocalSgd::step() {
  auto& s = *impl_;
  s.stats.steps += 1;
  if (!s.cfg.enabled || !s.state_avg) return;
  if (s.stats.steps <= s.cfg.warmup_steps) {
    if (s.stats.steps == s.cfg.warmup_steps) s.reset_outer();  // DiLoCo starts from the warmed-up weights
    return;
  }
  s.finished = false;
  s.since_sync += 1;
  if (s.pending) {
    s.pending_age += 1;
    if (s.pending_age >= s.cfg.overlap_steps) {
      s.await_mean();
      s.complete_sync(true);
    } else if (!s.mean_ready) {
      s.state_avg->test_mean();  // progress without a progress thread
    }
  }
  if (s.since_sync >= s.cfg.steps) s.begin_sync(s.cfg.overlap_steps == 0);
}

void LocalSgd::finish() {
  auto& s = *impl_;
  if (s.finished || !s.state_avg) return;
  if (s.pending) {
    s.await_mean();
    s.complete_sync(true);
  }
  if (s.since_sync > 0) s.begin_sync(true);
  s.finished = true;
}

const SyncStats& LocalSgd::stats() const { return impl_->stats; }
int64_t LocalSgd::local_step() const { return impl_->since_sync; }

void LocalSgd::set_post_average_hook(std::function<void()> hook) { impl_->hook = std::move(hook); }

double LocalSgd::measure_drift() {
  auto& s = *impl_;
  HT_REQUIRE(!s.pending, ExitCode::kRuntime, "local_sgd: measure_drift while an overlapped average is pending");
  std::vector<torch::Tensor> params = s.sync_set;
  comm::ParamAverager probe(s.comm, params, comm::AveragerOptions{comm::ExchangeDType::kF32, 0, false, "drift probe"});
  probe.pack(params);
  auto local = probe.flat().clone();
  probe.allreduce_mean();
  const double sq = (local - probe.flat()).square().sum(torch::kDouble).item<double>();
  return std::sqrt(s.comm.allreduce_sum(sq) / s.comm.size());
}

}  // namespace ht::train
