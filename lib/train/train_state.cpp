#include "train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace ht::train {

torch::Tensor cpu_rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }

void set_cpu_rng_state(const torch::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle sharing the global generator
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

namespace {

// Every CUDA device's generator: a rank on cuda:3 draws its dropout masks from device 3's.
void capture_cuda_rng(std::map<std::string, torch::Tensor>& out) {
  if (!torch::cuda::is_available()) return;
  for (int64_t d = 0; d < static_cast<int64_t>(torch::cuda::device_count()); ++d)
    out["rng/cuda" + std::to_string(d)] =
        at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d))).get_state();
}

void restore_cuda_rng(const std::map<std::string, torch::Tensor>& in) {
  if (!torch::cuda::is_available()) return;
  for (int64_t d = 0; d < static_cast<int64_t>(torch::cuda::device_count()); ++d) {
    auto it = in.find("rng/cuda" + std::to_string(d));
    if (it == in.end()) continue;
    at::Generator gen =
        at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d)));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(it->second);
  }
}

std::map<std::string, torch::Tensor> with_prefix(const std::map<std::string, torch::Tensor>& in,
                                                 const std::string& prefix) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [k, v] : in)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

// /model holds the averaged model (what eval, export and inspect read); while the replicas
// differ, each rank's own values go beside it as rank/<r>/replica/..., so that a resume continues
// every replica exactly instead of averaging them (which would change the run).
void capture_model(const StateRefs& refs, checkpoint::Snapshot& s) {
  std::unordered_map<const void*, torch::Tensor> averaged;
  const bool differ = refs.dp.replicas_differ();
  if (differ) {
    const auto copies = refs.dp.averaged_copies();
    const auto& sync = refs.dp.sync_tensors();
    for (size_t i = 0; i < sync.size(); ++i) averaged[sync[i].unsafeGetTensorImpl()] = copies[i];
  }
  auto model_value = [&](const torch::Tensor& t) {
    auto it = averaged.find(t.unsafeGetTensorImpl());
    return (it == averaged.end() ? t : it->second).detach().cpu().clone();
  };
  for (const auto& p : refs.gpt->named_parameters())
    s.tensors[checkpoint::kParamPrefix + p.key()] = model_value(p.value());
  for (const auto& b : refs.gpt->named_buffers())
    s.tensors[checkpoint::kBufferPrefix + b.key()] = model_value(b.value());
  if (!differ) return;
  for (const auto& p : refs.gpt->named_parameters())
    s.per_rank[checkpoint::kReplicaPrefix + (checkpoint::kParamPrefix + p.key())] = p.value().detach().cpu().clone();
  for (const auto& b : refs.gpt->named_buffers())
    s.per_rank[checkpoint::kReplicaPrefix + (checkpoint::kBufferPrefix + b.key())] = b.value().detach().cpu().clone();
}

}  // namespace

checkpoint::Snapshot capture_state(const StateRefs& refs, const Counters& counters, const RunInfo& run,
                                   comm::Communicator& comm) {
  checkpoint::Snapshot s;
  s.world_size = comm.size();
  capture_model(refs, s);
  auto& moments = refs.dp.moments_per_rank() ? s.per_rank : s.tensors;
  for (auto& [k, v] : refs.dp.optimizer_state()) moments[checkpoint::kOptimizerPrefix + k] = v;
  s.ints["step"] = counters.step;
  s.ints["tokens_seen"] = counters.tokens_seen;
  s.ints["global_batch"] = counters.global_batch;
  s.train_seconds = counters.train_seconds;
  const auto ls = refs.loader.state();
  s.ints["loader/seed"] = ls.seed;
  s.ints["loader/epoch"] = ls.epoch;
  s.ints["loader/samples_consumed"] = ls.samples_consumed;
  const StrategyState dp = refs.dp.state();
  for (const auto& [k, v] : dp.shared) s.tensors[checkpoint::kStrategyPrefix + k] = v.detach().cpu().clone();
  for (const auto& [k, v] : dp.ints) s.ints[checkpoint::kStrategyPrefix + k] = v;
  for (const auto& [k, v] : dp.per_rank) s.per_rank[checkpoint::kStrategyPrefix + k] = v;
  s.per_rank["rng/cpu"] = cpu_rng_state();
  capture_cuda_rng(s.per_rank);
  s.strings["config"] = run.config_toml;
  s.strings["dataset_identity"] = run.dataset_identity;
  s.run_id = run.run_id;
  return s;
}

namespace {

void restore_model(model::Gpt& gpt, const checkpoint::Snapshot& snap, bool own_replica) {
  torch::NoGradGuard no_grad;
  auto source = [&](const std::string& key) -> const torch::Tensor& {
    if (own_replica) {
      auto it = snap.per_rank.find(checkpoint::kReplicaPrefix + key);
      HT_REQUIRE(it != snap.per_rank.end(), ExitCode::kData, "checkpoint {}: this rank's replica lacks '{}'",
                 snap.path, key);
      return it->second;
    }
    return snap.tensors.at(key);
  };
  auto copy = [&](torch::Tensor& dst, const std::string& key) {
    const torch::Tensor& src = source(key);
    HT_REQUIRE(src.sizes() == dst.sizes(), ExitCode::kData, "checkpoint {}: '{}' has shape {}, the model {}",
               snap.path, key, c10::str(src.sizes()), c10::str(dst.sizes()));
    dst.copy_(src);
  };
  for (auto& p : gpt->named_parameters()) copy(p.value(), checkpoint::kParamPrefix + p.key());
  for (auto& b : gpt->named_buffers()) copy(b.value(), checkpoint::kBufferPrefix + b.key());
}

void restore_optimizer(const StateRefs& refs, const checkpoint::Snapshot& snap) {
  // Moments are per rank when written by local SGD, else shared (check_compatible has refused
  // per-rank moments for a run that shares them).
  const bool per_rank = !snap.per_rank.empty() &&
                        std::any_of(snap.per_rank.begin(), snap.per_rank.end(), [](const auto& kv) {
                          return kv.first.rfind(checkpoint::kOptimizerPrefix, 0) == 0;
                        });
  refs.dp.load_optimizer_state(with_prefix(per_rank ? snap.per_rank : snap.tensors, checkpoint::kOptimizerPrefix));
}

}  // namespace

namespace {

void check_same_data(const checkpoint::Snapshot& snap, const std::string& identity, bool allow_change) {
  auto it = snap.strings.find("dataset_identity");
  if (it == snap.strings.end()) return;  // written before identities were stored
  if (it->second == identity) return;
  HT_REQUIRE(allow_change, ExitCode::kUsage,
             "checkpoint {} was trained on other data than data.path holds now (dataset identity {} in the "
             "checkpoint, {} now): the file was replaced or re-prepared, so the resumed run would not continue the "
             "same training; set checkpoint.allow_dataset_change = true to resume anyway",
             snap.path, it->second, identity);
  HT_WARN("resuming {} on other data (dataset identity {} -> {}): checkpoint.allow_dataset_change = true", snap.path,
          it->second, identity);
}

}  // namespace

void check_counters(const checkpoint::Snapshot& snap) {
  const auto step = snap.ints.find("step");
  if (step == snap.ints.end()) return;  // not a training state; restore_state names what it lacks
  HT_REQUIRE(step->second == snap.step, ExitCode::kData,
             "checkpoint {}: the root attribute step = {} but /state/step = {}: one of them is damaged", snap.path,
             snap.step, step->second);
  const std::pair<const char*, int64_t> least[] = {
      {"tokens_seen", 0}, {"global_batch", 1}, {"loader/epoch", 0}, {"loader/samples_consumed", 0}};
  for (const auto& [key, min] : least) {
    const auto it = snap.ints.find(key);
    HT_REQUIRE(it == snap.ints.end() || it->second >= min, ExitCode::kData,
               "checkpoint {}: /state/{} = {} is out of range (damaged file)", snap.path, key,
               it == snap.ints.end() ? 0 : it->second);
  }
  const std::string steps = checkpoint::kOptimizerPrefix + "step/";
  for (const auto* m : {&snap.tensors, &snap.per_rank})
    for (const auto& [key, t] : *m) {
      if (key.rfind(steps, 0) != 0 || t.numel() != 1) continue;
      const double n = t.to(torch::kFloat64).item<double>();
      HT_REQUIRE(std::isfinite(n) && n >= 0 && n == std::floor(n) && n <= static_cast<double>(step->second),
                 ExitCode::kData,
                 "checkpoint {}: '{}' = {} is not a step count between 0 and the training step {} (damaged file)",
                 snap.path, key, n, step->second);
    }
}

void restore_state(const StateRefs& refs, Counters& counters, const checkpoint::Snapshot& snap, int world_size,
                   const std::string& dataset_identity, bool allow_dataset_change) {
  check_counters(snap);
  auto get = [&](const std::string& k) {
    auto it = snap.ints.find(k);
    HT_REQUIRE(it != snap.ints.end(), ExitCode::kData, "checkpoint lacks '{}'", k);
    return it->second;
  };
  const int64_t batch = get("global_batch");
  HT_REQUIRE(batch == counters.global_batch, ExitCode::kUsage,
             "checkpoint was written with a global batch of {} samples, this run has {} (ranks x "
             "train.micro_batch_size x train.grad_accum_steps); keep the global batch when resuming",
             batch, counters.global_batch);
  check_same_data(snap, dataset_identity, allow_dataset_change);
  checkpoint::Expectation want = checkpoint::expectation_of(*refs.gpt);
  want.optimizer = true;
  want.moments_per_rank = refs.dp.moments_per_rank();
  want.moment_names = refs.dp.optimizer().moment_names();
  want.optimizer_name = std::string(config::name_of(refs.dp.optimizer().kind()));
  checkpoint::check_compatible(snap, want);
  // Same rank count: every rank continues its own replica. Another count: the averaged model.
  const bool exact = snap.world_size == world_size;
  const bool replicas = std::any_of(snap.per_rank.begin(), snap.per_rank.end(), [](const auto& kv) {
    return kv.first.rfind(checkpoint::kReplicaPrefix, 0) == 0;
  });
  restore_model(refs.gpt, snap, exact && replicas);
  restore_optimizer(refs, snap);
  counters.step = get("step");
  counters.tokens_seen = get("tokens_seen");
  counters.train_seconds = snap.train_seconds;
  refs.loader.restore({get("loader/seed"), get("loader/epoch"), get("loader/samples_consumed")});
  StrategyState dp;
  const std::string prefix = checkpoint::kStrategyPrefix;
  for (const auto& [k, v] : snap.ints)
    if (k.rfind(prefix, 0) == 0) dp.ints[k.substr(prefix.size())] = v;
  dp.shared = with_prefix(snap.tensors, prefix);
  dp.per_rank = with_prefix(snap.per_rank, prefix);
  refs.dp.load_state(dp, exact);
  // Last: nothing above draws random numbers, and the first step after resume sees these streams.
  auto rng = snap.per_rank.find("rng/cpu");
  if (rng != snap.per_rank.end()) set_cpu_rng_state(rng->second);
  restore_cuda_rng(snap.per_rank);
}

std::optional<config::Config> stored_config(const checkpoint::Snapshot& snap) {
  const auto it = snap.strings.find("config");
  if (it == snap.strings.end()) return std::nullopt;
  return config::load_text(it->second, snap.path + " (stored config)", {});
}

}  // namespace ht::train
