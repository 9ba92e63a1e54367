// Internal to train/: the state of a LocalSgd scope, shared by its synchronisation logic
// (local_sgd.cpp) and its checkpoint side (local_sgd_state.cpp: passive views, save, restore).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/param_averager.h"
#include "config/config.h"
#include "train/grad_overlap.h"
#include "train/local_sgd.h"

namespace ht::train::detail {

comm::ExchangeDType exchange_dtype(config::ExchangeDtype t);

// DiLoCo outer step on (global, momentum) with the averaged pseudo-gradient g:
// m = mu m + g; update = nesterov ? g + mu m : m; global -= outer_lr * update.
void outer_update(torch::Tensor& global, torch::Tensor& momentum, const torch::Tensor& g,
                  const config::LocalSgdConfig& cfg);

}  // namespace ht::train::detail

namespace ht::train {

struct LocalSgd::Impl {
  torch::nn::Module& model;
  torch::optim::Optimizer& optimizer;
  comm::Communicator& comm;
  config::LocalSgdConfig cfg;
  bool diloco = false;

  std::vector<torch::Tensor> trainable;  // parameters with requires_grad (gradient averaging)
  std::vector<torch::Tensor> sync_set;   // parameters (+ float buffers) averaged at a sync
  std::unique_ptr<comm::ParamAverager> state_avg, grad_avg, moment_avg;
  std::unique_ptr<comm::ParamAverager> view_avg;  // averaged_copies(): never bound, never in stats
  std::unique_ptr<GradOverlap> grad_overlap;      // per-step gradients in buckets during backward
  torch::Tensor snapshot;                // fp32 local values at the last sync start
  torch::Tensor global, momentum;        // DiLoCo outer copy and its momentum (fp32 flat)
  std::function<void()> hook;

  SyncStats stats;
  int64_t since_sync = 0;   // local steps since the last sync started
  int64_t pending_age = 0;  // steps since an overlapped average was started
  bool pending = false;
  bool mean_ready = false;  // the pending average has arrived (in state_avg's flat), not yet applied
  bool finished = true;     // nothing to do in finish() until the next local step
  bool grads_bound = false; // gradients live in grad_avg's flat buffer

  Impl(torch::nn::Module& m, torch::optim::Optimizer& o, comm::Communicator& c, const config::LocalSgdConfig& k)
      : model(m), optimizer(o), comm(c), cfg(k), diloco(k.outer == config::OuterOptimizer::kDiloco) {}

  comm::AveragerOptions averager_options(const std::string& name) const {
    comm::AveragerOptions o;
    o.dtype = detail::exchange_dtype(cfg.comm_dtype);
    o.bucket_mb = cfg.bucket_mb;
    o.name = name;
    return o;
  }
  bool synchronous_now() const { return !cfg.enabled || stats.steps < cfg.warmup_steps; }

  void reset_outer() {
    if (!diloco) return;
    state_avg->pack(sync_set);
    global.copy_(state_avg->flat());
    momentum.zero_();
  }

  void average_grads();
  void setup_grad_overlap();
  void average_grads_overlapped();
  void await_mean();
  void begin_sync(bool blocking);
  void complete_sync(bool overlapped);
  double local_drift_squared() const;
  void outer_step();
  void average_moments();
};

}  // namespace ht::train
