#include "train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"

namespace ht::train {

torch::Tensor cpu_rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }

void set_cpu_rng_state(const torch::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle sharing the global generator
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

namespace {

torch::optim::AdamWParamState* adam_state(torch::optim::AdamW& opt, const torch::Tensor& p) {
  auto& states = opt.state();
  auto it = states.find(p.unsafeGetTensorImpl());
  if (it == states.end()) return nullptr;
  return static_cast<torch::optim::AdamWParamState*>(it->second.get());
}

torch::Tensor cuda_rng_state() {
  if (!torch::cuda::is_available()) return {};
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, 0)).get_state();
}

}  // namespace

checkpoint::Snapshot capture_state(const StateRefs& refs, const Counters& counters, const std::string& config_toml,
                                   comm::Communicator& comm) {
  checkpoint::Snapshot s;
  s.world_size = comm.size();
  for (const auto& p : refs.gpt->named_parameters()) s.tensors["model/" + p.key()] = p.value().detach().cpu().clone();
  for (const auto& b : refs.gpt->named_buffers()) s.tensors["model_buffers/" + b.key()] = b.value().detach().cpu().clone();
  auto& moments = refs.optimizer_per_rank ? s.per_rank : s.tensors;
  for (const auto& p : refs.gpt->named_parameters()) {
    auto* st = adam_state(refs.optimizer, p.value());
    if (!st) continue;
    moments["optimizer/exp_avg/" + p.key()] = st->exp_avg().detach().cpu().clone();
    moments["optimizer/exp_avg_sq/" + p.key()] = st->exp_avg_sq().detach().cpu().clone();
    moments["optimizer/step/" + p.key()] = torch::tensor({st->step()}, torch::kInt64);
  }
  s.ints["step"] = counters.step;
  s.ints["tokens_seen"] = counters.tokens_seen;
  s.ints["global_batch"] = counters.global_batch;
  const auto ls = refs.loader.state();
  s.ints["loader/seed"] = ls.seed;
  s.ints["loader/epoch"] = ls.epoch;
  s.ints["loader/samples_consumed"] = ls.samples_consumed;
  for (const auto& [k, v] : refs.local_sgd.state_tensors()) s.tensors["local_sgd/" + k] = v.detach().cpu().clone();
  for (const auto& [k, v] : refs.local_sgd.state_ints()) s.ints["local_sgd/" + k] = v;
  s.per_rank["rng/cpu"] = cpu_rng_state();
  auto cuda = cuda_rng_state();
  if (cuda.defined()) s.per_rank["rng/cuda0"] = cuda;
  s.strings["config"] = config_toml;
  return s;
}

namespace {

void restore_model(model::Gpt& gpt, const checkpoint::Snapshot& snap) {
  torch::NoGradGuard no_grad;
  for (auto& p : gpt->named_parameters()) {
    auto it = snap.tensors.find("model/" + p.key());
    HT_REQUIRE(it != snap.tensors.end(), ExitCode::kUsage, "checkpoint has no parameter '{}' (different model?)",
               p.key());
    HT_REQUIRE(it->second.sizes() == p.value().sizes(), ExitCode::kUsage,
               "checkpoint parameter '{}' has shape {} but the model expects {}", p.key(), c10::str(it->second.sizes()),
               c10::str(p.value().sizes()));
    p.value().copy_(it->second);
  }
  for (auto& b : gpt->named_buffers()) {
    auto it = snap.tensors.find("model_buffers/" + b.key());
    if (it != snap.tensors.end()) b.value().copy_(it->second);
  }
}

void restore_optimizer(const StateRefs& refs, const checkpoint::Snapshot& snap) {
  // Moments are per rank when written by local SGD with local moments, else shared; accept either.
  const bool per_rank = !snap.per_rank.empty() &&
                        std::any_of(snap.per_rank.begin(), snap.per_rank.end(),
                                    [](const auto& kv) { return kv.first.rfind("optimizer/", 0) == 0; });
  const auto& src = per_rank ? snap.per_rank : snap.tensors;
  for (const auto& p : refs.gpt->named_parameters()) {
    auto m = src.find("optimizer/exp_avg/" + p.key());
    if (m == src.end()) continue;  // parameter had no step yet
    auto v = src.find("optimizer/exp_avg_sq/" + p.key());
    auto t = src.find("optimizer/step/" + p.key());
    HT_REQUIRE(v != src.end() && t != src.end(), ExitCode::kData, "checkpoint optimizer state of '{}' is incomplete",
               p.key());
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->exp_avg(m->second.to(p.value().device()).clone());
    st->exp_avg_sq(v->second.to(p.value().device()).clone());
    st->step(t->second.item<int64_t>());
    refs.optimizer.state()[p.value().unsafeGetTensorImpl()] = std::move(st);
  }
}

}  // namespace

void restore_state(const StateRefs& refs, Counters& counters, const checkpoint::Snapshot& snap) {
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
  restore_model(refs.gpt, snap);
  restore_optimizer(refs, snap);
  counters.step = get("step");
  counters.tokens_seen = get("tokens_seen");
  refs.loader.restore({get("loader/seed"), get("loader/epoch"), get("loader/samples_consumed")});
  std::map<std::string, torch::Tensor> lt;
  std::map<std::string, int64_t> li;
  for (const auto& [k, v] : snap.tensors)
    if (k.rfind("local_sgd/", 0) == 0) lt[k.substr(10)] = v;
  for (const auto& [k, v] : snap.ints)
    if (k.rfind("local_sgd/", 0) == 0) li[k.substr(10)] = v;
  refs.local_sgd.load_state(lt, li);
  auto rng = snap.per_rank.find("rng/cpu");
  if (rng != snap.per_rank.end()) set_cpu_rng_state(rng->second);
  auto cuda = snap.per_rank.find("rng/cuda0");
  if (cuda != snap.per_rank.end() && torch::cuda::is_available())
  {
    at::Generator gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, 0));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(cuda->second);
  }
}

}  // namespace ht::train
