// The DataParallel base (what every strategy shares) and the choice of a strategy from the config.
#include "train/data_parallel/data_parallel.h"

#include "comm/agree.h"
#include "comm/param_averager.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "train/data_parallel/local_sgd.h"
#include "train/data_parallel/sync.h"
#include "train/data_parallel/zero1.h"
#include "train/optimizer/schedule.h"

namespace ht::train {

DataParallel::~DataParallel() = default;

void DataParallel::zero_grad() {
  for (auto& p : model_.parameters()) {
    auto& g = p.mutable_grad();
    if (!g.defined()) continue;
    g.detach_();
    g.zero_();
  }
}

double DataParallel::clip_and_update(double max_norm) {
  const double norm = clip_grad_norm(model_, max_norm);
  optimizer().step();
  return norm;
}

std::vector<torch::Tensor> DataParallel::averaged_copies() {
  std::vector<torch::Tensor> out;
  for (const auto& t : sync_set_) out.push_back(t.detach().clone());
  return out;
}

void DataParallel::with_averaged_model(const std::function<void()>& fn) {
  if (!replicas_differ()) return fn();
  const auto averaged = averaged_copies();
  std::vector<torch::Tensor> own;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < sync_set_.size(); ++i) {
      own.push_back(sync_set_[i].detach().clone());
      sync_set_[i].detach().copy_(averaged[i]);
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
  } restore{sync_set_, own};
  fn();
}

std::map<std::string, torch::Tensor> DataParallel::optimizer_state() {
  Optimizer& opt = optimizer();
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : opt.params()) {
    const MomentState* st = opt.state_of(p.tensor);
    if (!st) continue;
    for (size_t k = 0; k < st->moments.size(); ++k)
      out[opt.moment_names()[k] + "/" + p.name] = st->moments[k].detach().cpu().clone();
    out["step/" + p.name] = torch::tensor({st->step}, torch::kInt64);
  }
  return out;
}

void DataParallel::load_optimizer_state(const std::map<std::string, torch::Tensor>& state) {
  Optimizer& opt = optimizer();
  for (const auto& p : opt.params()) {
    std::vector<torch::Tensor> moments;
    for (const auto& m : opt.moment_names()) {
      auto it = state.find(m + "/" + p.name);
      if (it != state.end()) moments.push_back(it->second);
    }
    auto step = state.find("step/" + p.name);
    if (moments.empty() && step == state.end()) continue;  // no step of this tensor yet
    HT_REQUIRE(moments.size() == opt.moment_names().size() && step != state.end(), ExitCode::kData,
               "checkpoint optimizer state of '{}' is incomplete", p.name);
    opt.set_state(p.tensor, std::move(moments), step->second.item<int64_t>());
  }
}

namespace {

std::string describe_tensor(const torch::Tensor& t) {
  std::string out = c10::toString(t.scalar_type());
  for (auto d : t.sizes()) out += fmt::format("x{}", d);
  return out;
}

// Hash of (names, shapes, dtypes) and of the data-parallel settings every rank must share; the
// allgather tells each rank which ranks differ from rank 0, and every rank throws the same error.
void verify_same_model(comm::Communicator& comm, torch::nn::Module& model, const config::Config& cfg) {
  uint64_t h = kFnvOffset;
  int64_t n = 0;
  for (const auto& p : model.named_parameters()) h = fnv1a(h, "p:" + p.key() + ":" + describe_tensor(p.value())), ++n;
  for (const auto& b : model.named_buffers()) h = fnv1a(h, "b:" + b.key() + ":" + describe_tensor(b.value())), ++n;
  const auto& c = cfg.local_sgd;
  h = fnv1a(h, fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", c.enabled, c.steps, c.warmup_steps,
                           c.average_buffers, config::name_of(c.optimizer_state), config::name_of(c.outer),
                           config::name_of(c.comm_dtype), c.overlap_steps, c.bucket_mb, c.overlap_grad_allreduce,
                           c.fragments, c.group_size, c.quant_block, cfg.train.shard_optimizer,
                           config::name_of(cfg.train.optimizer)));
  const comm::Disagreement d = comm::compare_with_root(comm, h);
  HT_REQUIRE(d.ranks.empty(), ExitCode::kUsage,
             "data parallel: rank(s) {} disagree with rank 0 on the model shape or the data-parallel settings "
             "(hash of parameter names/shapes/dtypes and config differs; this rank has {} tensors, hash {:016x})",
             d.list(false), n, h);
}

}  // namespace

std::vector<torch::Tensor> sync_tensors_of(torch::nn::Module& model, bool with_buffers) {
  std::vector<torch::Tensor> out = model.parameters();
  if (with_buffers)
    for (auto& b : model.buffers())
      if (b.is_floating_point()) out.push_back(b);
  return out;
}

void check_world(const config::Config& cfg, int world_size, int node_size) {
  const auto& l = cfg.local_sgd;
  if (!l.enabled || l.group_size == 1) return;
  const int g = l.group_size == 0 ? node_size : static_cast<int>(l.group_size);
  const std::string what =
      l.group_size == 0 ? fmt::format("local_sgd.group_size = 0 (the {} ranks of this node)", node_size)
                        : fmt::format("local_sgd.group_size = {}", l.group_size);
  // Sharding the state of a one-rank replica saves nothing: refused rather than quietly ignored.
  HT_REQUIRE(!cfg.train.shard_optimizer || g > 1, ExitCode::kUsage,
             "config key '{}': with local SGD it shards the optimizer state inside the groups of the hierarchical "
             "mode, but {} gives groups of one rank", "train.shard_optimizer", what);
  HT_REQUIRE(g <= world_size, ExitCode::kUsage, "config key '{}': {} is larger than the {} ranks of the job",
             "local_sgd.group_size", what, world_size);
  HT_REQUIRE(world_size % g == 0, ExitCode::kUsage, "config key '{}': {} does not divide the {} ranks of the job",
             "local_sgd.group_size", what, world_size);
}

std::unique_ptr<DataParallel> make_data_parallel(torch::nn::Module& model, comm::Communicator& comm,
                                                 const config::Config& cfg) {
  const auto& l = cfg.local_sgd;
  for (const auto& [key, is_auto] :
       {std::pair<const char*, bool>{"local_sgd.steps", l.enabled && l.steps == config::LocalSgdConfig::kAutoSteps},
        std::pair<const char*, bool>{"local_sgd.fragments", l.fragments == config::LocalSgdConfig::kAutoFragments},
        std::pair<const char*, bool>{"local_sgd.comm_dtype", l.comm_dtype == config::ExchangeDtype::kAuto}})
    HT_REQUIRE(!is_auto, ExitCode::kUsage,
               "config key '{}': auto is resolved by the trainer (train::resolve_local_steps) before the strategy is "
               "built; a hand-written loop sets it or calls resolve_local_steps first",
               key);
  verify_same_model(comm, model, cfg);
  std::vector<torch::Tensor> params = model.parameters(), buffers;
  for (auto& b : model.buffers())
    if (b.is_floating_point()) buffers.push_back(b);
  // Identical start: rank 0's parameters and buffers everywhere.
  comm::broadcast_tensors(comm, params, 0);
  comm::broadcast_tensors(comm, buffers, 0);
  std::unique_ptr<DataParallel> dp;
  if (cfg.local_sgd.enabled) {
    dp = make_local_sgd(model, comm, cfg);
  } else if (cfg.train.shard_optimizer && comm.size() > 1) {
    dp = std::make_unique<Zero1>(model, comm, cfg);
  } else {
    dp = std::make_unique<SyncAllReduce>(model, comm, cfg, make_optimizer(cfg.train, optimizer_params(model)));
  }
  return dp;
}

}  // namespace ht::train
