// The checkpoint side of LocalSgd: the passive view of the averaged model, and the state a
// checkpoint saves and a resume restores (shared and per rank).
#include <torch/torch.h>

#include "core/error.h"
#include "train/local_sgd.h"
#include "train/local_sgd_impl.h"

namespace ht::train {

using detail::outer_update;

bool LocalSgd::replicas_differ() const { return impl_->state_avg && (impl_->since_sync > 0 || impl_->pending); }

const std::vector<torch::Tensor>& LocalSgd::sync_tensors() const { return impl_->sync_set; }

// What finish() would do, on copies: the pending average applied (overlap), then one blocking
// average of the result (plain mean, or DiLoCo's outer step on copies of global and momentum).
// Same exchange settings as state_avg, so the values are bitwise those finish() would give.
std::vector<torch::Tensor> LocalSgd::averaged_copies() {
  auto& s = *impl_;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  if (!replicas_differ()) {
    for (const auto& t : s.sync_set) out.push_back(t.detach().clone());
    return out;
  }
  if (!s.view_avg) s.view_avg = std::make_unique<comm::ParamAverager>(s.comm, s.sync_set, s.averager_options("average view"));
  auto& flat = s.view_avg->flat();
  s.view_avg->pack(s.sync_set);
  torch::Tensor global, momentum;
  if (s.diloco) {
    global = s.global.clone();
    momentum = s.momentum.clone();
  }
  if (s.pending) {
    s.await_mean();
    if (s.diloco) outer_update(global, momentum, s.state_avg->flat(), s.cfg);
    const auto& target = s.diloco ? global : s.state_avg->flat();
    flat.add_(target - s.snapshot);
  }
  if (s.since_sync > 0) {
    if (s.diloco) flat.neg_().add_(global);
    s.view_avg->allreduce_mean();
    if (s.diloco) {
      outer_update(global, momentum, flat, s.cfg);
      flat.copy_(global);
    }
  }
  for (size_t i = 0; i < s.sync_set.size(); ++i)
    out.push_back(s.view_avg->slice(flat, i).view(s.sync_set[i].sizes()).clone());
  return out;
}

void LocalSgd::with_averaged_model(const std::function<void()>& fn) {
  if (!replicas_differ()) return fn();
  const auto averaged = averaged_copies();
  const auto& sync = sync_tensors();
  std::vector<torch::Tensor> own;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < sync.size(); ++i) {
      own.push_back(sync[i].detach().clone());
      sync[i].detach().copy_(averaged[i]);
    }
  }
  // Restored also when fn throws: the error may be handled (run_agreed) and the replica live on.
  struct Restore {
    const std::vector<torch::Tensor>& sync;
    const std::vector<torch::Tensor>& own;
    ~Restore() {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < own.size(); ++i) sync[i].detach().copy_(own[i]);
    }
  } restore{sync, own};
  fn();
}

std::map<std::string, torch::Tensor> LocalSgd::state_tensors() const {
  const auto& s = *impl_;
  std::map<std::string, torch::Tensor> out;
  if (s.diloco && s.global.defined()) {
    const int64_t n = s.state_avg->numel();  // without the padding, so W may change on restart
    out["outer_global"] = s.global.narrow(0, 0, n).detach().cpu().clone();
    out["outer_momentum"] = s.momentum.narrow(0, 0, n).detach().cpu().clone();
  }
  return out;
}

std::map<std::string, torch::Tensor> LocalSgd::rank_state_tensors() {
  auto& s = *impl_;
  std::map<std::string, torch::Tensor> out;
  if (!s.pending) return out;
  s.await_mean();  // the transfer ends now instead of later; the values it delivers are the same
  const int64_t n = s.state_avg->numel();
  out["snapshot"] = s.snapshot.narrow(0, 0, n).detach().cpu().clone();
  out["pending_mean"] = s.state_avg->flat().narrow(0, 0, n).detach().cpu().clone();
  return out;
}

std::map<std::string, int64_t> LocalSgd::state_ints() const {
  const auto& s = *impl_;
  return {{"steps", s.stats.steps},
          {"since_sync", s.since_sync},
          {"pending", s.pending ? 1 : 0},
          {"pending_age", s.pending_age},
          {"syncs", s.stats.syncs},
          {"grad_allreduces", s.stats.grad_allreduces},
          {"bytes_sent", static_cast<int64_t>(s.stats.bytes_sent)}};
}

void LocalSgd::load_state(const std::map<std::string, torch::Tensor>& tensors, const std::map<std::string, int64_t>& ints,
                          const std::map<std::string, torch::Tensor>& rank_tensors, bool exact) {
  auto& s = *impl_;
  HT_REQUIRE(!s.pending, ExitCode::kRuntime, "local_sgd: load_state while an average is pending");
  auto get = [&](const char* k) { auto it = ints.find(k); return it == ints.end() ? int64_t{0} : it->second; };
  s.stats.steps = get("steps");
  s.stats.syncs = get("syncs");
  s.stats.grad_allreduces = get("grad_allreduces");
  s.stats.bytes_sent = static_cast<uint64_t>(get("bytes_sent"));
  const int64_t n = s.state_avg ? s.state_avg->numel() : 0;
  auto restore = [&](const std::map<std::string, torch::Tensor>& from, const char* key, torch::Tensor dst) {
    auto it = from.find(key);
    HT_REQUIRE(it != from.end(), ExitCode::kData, "local_sgd: checkpoint lacks '{}'", key);
    HT_REQUIRE(it->second.numel() == n, ExitCode::kData,
               "local_sgd: checkpoint '{}' has {} elements, the model needs {}", key, it->second.numel(), n);
    dst.narrow(0, 0, n).copy_(it->second.reshape({-1}));
  };
  if (exact) {
    s.since_sync = get("since_sync");
    s.pending = s.state_avg && get("pending") != 0;
    s.pending_age = get("pending_age");
    if (s.pending) {
      restore(rank_tensors, "snapshot", s.snapshot);
      restore(rank_tensors, "pending_mean", s.state_avg->flat());
      s.mean_ready = true;
    }
  } else {
    // Another rank count: the run continues from the averaged model (/model), as after a sync.
    s.since_sync = 0;
    s.pending = false;
  }
  s.finished = s.since_sync == 0 && !s.pending;
  if (!s.diloco || !s.global.defined()) return;
  restore(tensors, "outer_global", s.global);
  restore(tensors, "outer_momentum", s.momentum);
  if (!exact) s.state_avg->pack(s.sync_set), s.global.copy_(s.state_avg->flat());
}


}  // namespace ht::train
