// The passive side of LocalSgd: the averaged model for evaluations and checkpoints, and the state
// a checkpoint saves and a resume restores (shared and per rank).
#include "core/error.h"
#include "train/data_parallel/local_sgd.h"

namespace ht::train {

bool LocalSgd::replicas_differ() const {
  for (const auto& f : fragments_)
    if (f.steps_since > 0 || f.exchange->pending()) return true;
  return false;
}

// The local values in a fresh layout-sized buffer (the layout's own buffer may hold an exchange).
torch::Tensor LocalSgd::local_values() const {
  torch::NoGradGuard no_grad;
  auto values = torch::zeros_like(layout_->flat());
  for (size_t i = 0; i < sync_set_.size(); ++i) layout_->slice(values, i).copy_(sync_set_[i].detach().reshape({-1}));
  return values;
}

// What finish() would do, on copies, fragment by fragment: bitwise the values finish() gives.
std::vector<torch::Tensor> LocalSgd::averaged_copies() {
  if (!replicas_differ()) return DataParallel::averaged_copies();
  torch::NoGradGuard no_grad;
  auto values = local_values();
  for (auto& f : fragments_) f.exchange->average_into(values, f.steps_since > 0);
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < sync_set_.size(); ++i)
    out.push_back(layout_->slice(values, i).view(sync_set_[i].sizes()).clone());
  return out;
}

std::string LocalSgd::key(size_t f, const std::string& name) const {
  return fragments_.size() == 1 ? name : fmt::format("fragment{}/{}", f, name);
}

StrategyState LocalSgd::state() {
  StrategyState s;
  const SyncStats& all = stats();
  bool any_pending = false;
  for (size_t i = 0; i < fragments_.size(); ++i) {
    auto& f = fragments_[i];
    any_pending = any_pending || f.exchange->pending();
    for (auto& [k, v] : f.exchange->pending_state()) s.per_rank[key(i, k)] = v;
    if (fragments_.size() > 1) {
      s.ints[key(i, "steps_since")] = f.steps_since;
      s.ints[key(i, "pending")] = f.exchange->pending() ? 1 : 0;
      s.ints[key(i, "age")] = f.age;
    }
  }
  s.ints["steps"] = all.steps;
  s.ints["since_sync"] = cycle_;
  s.ints["pending"] = any_pending ? 1 : 0;
  s.ints["pending_age"] = fragments_.empty() ? 0 : fragments_.front().age;
  s.ints["syncs"] = all.syncs;
  s.ints["grad_allreduces"] = all.grad_allreduces;
  s.ints["bytes_sent"] = static_cast<int64_t>(all.bytes_sent);
  if (outer_ && !fragments_.empty()) {
    auto global = torch::zeros_like(layout_->flat()), momentum = torch::zeros_like(layout_->flat());
    for (auto& f : fragments_) f.exchange->gather_outer(global, momentum);
    // Without the padding, so the rank count may change on restart.
    s.shared["outer_global"] = global.narrow(0, 0, layout_->numel()).cpu().clone();
    s.shared["outer_momentum"] = momentum.narrow(0, 0, layout_->numel()).cpu().clone();
  }
  return s;
}

void LocalSgd::load_state(const StrategyState& s, bool same_world) {
  for (const auto& f : fragments_)
    HT_REQUIRE(!f.exchange->pending(), ExitCode::kRuntime, "local_sgd: load_state while an exchange is in flight");
  auto get = [&](const std::string& k) { auto it = s.ints.find(k); return it == s.ints.end() ? int64_t{0} : it->second; };
  stats_ = SyncStats{};
  stats_.steps = get("steps");
  stats_.syncs = get("syncs");
  stats_.grad_allreduces = get("grad_allreduces");
  stats_.bytes_sent = static_cast<uint64_t>(get("bytes_sent"));
  auto tensor = [&](const std::map<std::string, torch::Tensor>& from, const std::string& k) {
    auto it = from.find(k);
    HT_REQUIRE(it != from.end(), ExitCode::kData, "local_sgd: checkpoint lacks '{}'", k);
    return it->second;
  };
  cycle_ = same_world ? get("since_sync") : 0;
  for (size_t i = 0; i < fragments_.size(); ++i) {
    auto& f = fragments_[i];
    const bool many = fragments_.size() > 1;
    f.steps_since = !same_world ? 0 : many ? get(key(i, "steps_since")) : cycle_;
    f.age = !same_world ? 0 : many ? get(key(i, "age")) : get("pending_age");
    if (same_world && get(key(i, "pending")) != 0)
      f.exchange->restore_pending(tensor(s.per_rank, key(i, "snapshot")), tensor(s.per_rank, key(i, "pending_mean")));
  }
  finished_ = !replicas_differ();
  if (!outer_ || fragments_.empty()) return;
  const int64_t n = layout_->numel();
  auto global = torch::zeros_like(layout_->flat()), momentum = torch::zeros_like(layout_->flat());
  for (auto [name, dst] : {std::pair{"outer_global", &global}, std::pair{"outer_momentum", &momentum}}) {
    const auto t = tensor(s.shared, name);
    HT_REQUIRE(t.numel() == n, ExitCode::kData, "local_sgd: checkpoint '{}' has {} elements, the model needs {}", name,
               t.numel(), n);
    dst->narrow(0, 0, n).copy_(t.reshape({-1}));
  }
  for (auto& f : fragments_) {
    f.exchange->restore_outer(global, momentum);
    // Another rank count: the run continues from the averaged model (/model), as after an exchange.
    if (!same_world) f.exchange->reset_outer(/*keep_momentum=*/true);
  }
}

}  // namespace ht::train
