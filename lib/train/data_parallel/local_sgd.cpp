// Local SGD: the cycle of fragment exchanges, the per-step strategy of warmup and of the groups,
// and the telemetry (see local_sgd.h).
#include "train/data_parallel/local_sgd.h"

#include <cmath>
#include <exception>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "train/data_parallel/sync.h"
#include "train/data_parallel/zero1.h"

namespace ht::train {

namespace {

bool outer_rule_needed(const config::LocalSgdConfig& c) {
  return c.outer == config::OuterOptimizer::kDiloco || comm::is_quantized(exchange_dtype(c.comm_dtype));
}

OuterRule outer_rule(const config::LocalSgdConfig& c) {
  if (c.outer == config::OuterOptimizer::kDiloco) return OuterRule{c.outer_lr, c.outer_momentum, c.nesterov};
  return OuterRule{1.0, 0.0, false};  // a quantized plain average: global := global - mean(global - local)
}

}  // namespace

LocalSgd::LocalSgd(torch::nn::Module& model, comm::Communicator& comm, const config::Config& cfg,
                   std::unique_ptr<comm::Communicator> group, std::unique_ptr<comm::Communicator> cross,
                   std::unique_ptr<DataParallel> inner, Warmup warmup)
    : DataParallel(model, comm, sync_tensors_of(model, cfg.local_sgd.average_buffers)),
      cfg_(cfg.local_sgd),
      group_(std::move(group)),
      cross_owned_(std::move(cross)),
      cross_(cross_owned_ ? cross_owned_.get() : &comm),
      inner_(std::move(inner)),
      warmup_(std::move(warmup.world)),
      warmup_shards_across_groups_(warmup.shards_across_groups) {
  HT_REQUIRE(cfg_.steps >= 1, ExitCode::kUsage, "local_sgd.steps = {} must be >= 1", cfg_.steps);
  HT_REQUIRE(cfg_.warmup_steps >= 0, ExitCode::kUsage, "local_sgd.warmup_steps = {} must be >= 0", cfg_.warmup_steps);
  HT_REQUIRE(cfg_.overlap_steps >= 0 && (cfg_.overlap_steps == 0 || cfg_.overlap_steps < cfg_.steps), ExitCode::kUsage,
             "local_sgd.overlap_steps = {} must be in [0, local_sgd.steps = {})", cfg_.overlap_steps, cfg_.steps);
  HT_REQUIRE(cfg_.steps % cfg_.fragments == 0, ExitCode::kUsage,
             "local_sgd.fragments = {} does not divide local_sgd.steps = {}", cfg_.fragments, cfg_.steps);
  HT_REQUIRE(cfg_.fragments == 1 || cfg_.optimizer_state == config::OptimizerState::kLocal, ExitCode::kUsage,
             "local_sgd.optimizer_state = average needs local_sgd.fragments = 1");
  if (sync_set_.empty()) return;
  const auto dtype = exchange_dtype(cfg_.comm_dtype);
  const bool outer = outer_rule_needed(cfg_);
  outer_ = outer;
  const int64_t F = cfg_.fragments;
  const bool whole = F == 1 && !hierarchical();
  comm::AveragerOptions exchange;
  exchange.dtype = dtype;
  exchange.bucket_mb = cfg_.bucket_mb;
  exchange.quant_block = cfg_.quant_block;
  exchange.name = "parameters";
  if (whole) {
    layout_ = std::make_unique<comm::ParamAverager>(comm_, sync_set_, exchange);
  } else {
    // The layout only holds the values; its padding lets F fragments split into G slices of whole
    // exchange chunks (cross ranks x quantization block).
    comm::AveragerOptions o;
    o.name = "parameters (layout)";
    o.pad_multiple = F * group_->size() * cross_->size() * comm::elems_multiple(dtype, cfg_.quant_block);
    layout_comm_ = comm::make_local();
    layout_ = std::make_unique<comm::ParamAverager>(*layout_comm_, sync_set_, o);
  }
  // The parameters live in the layout's buffer unless an exchange keeps its own data there while
  // training goes on (the whole-model buffer of an overlapped exchange). A blocking outer exchange
  // writes the pseudo-gradient over them and the outer values back within one sync.
  const bool bindable = (!whole || cfg_.overlap_steps == 0) && !inner_->owns_parameter_storage();
  const bool bound = bindable && layout_->bind(sync_set_);
  HT_INFO("local_sgd: parameters {}", bound ? "stored in the flat exchange buffer (no pack/unpack per sync)"
                                           : "packed into the exchange buffer at each sync");
  const int64_t len = layout_->padded_numel() / F;
  for (int64_t f = 0; f < F; ++f) {
    if (F > 1) exchange.name = fmt::format("fragment {} of {}", f + 1, F);
    FragmentSetup setup{comm_,         *group_, *cross_, *layout_, sync_set_, f * len, (f + 1) * len,
                        exchange,      outer,   outer_rule(cfg_),  whole,    cfg_.consistency_check,
                        cfg_.overlap_steps > 0};
    Fragment frag;
    frag.exchange = std::make_unique<FragmentExchange>(setup);
    frag.start = (f + 1) * cfg_.steps / F;
    fragments_.push_back(std::move(frag));
  }
  // An exchange in flight moves only while someone calls into MPI: without these points a
  // multi-round collective (a ring's later rounds, an encoded exchange's allgather half) would
  // wait for the step it is merged at. A gradient hook per parameter tests it during backward.
  if (cfg_.overlap_steps > 0) {
    owner_ = std::this_thread::get_id();
    for (auto& p : model.parameters()) {
      if (!p.requires_grad()) continue;
      const unsigned h = p.register_hook([this](const torch::Tensor&) { progress_from_backward(); });
      progress_hooks_.emplace_back(p, h);
    }
  }
}

void LocalSgd::progress_from_backward() {
  // Only the thread that owns MPI may call it (MPI_THREAD_FUNNELED): a CUDA backward's device
  // threads leave the exchange to the step boundaries.
  if (std::this_thread::get_id() != owner_) return;
  for (auto& f : fragments_) {
    if (!f.exchange->pending()) continue;
    f.exchange->progress();
    ++backward_progress_calls_;
  }
}

LocalSgd::~LocalSgd() {
  for (auto& [p, h] : progress_hooks_) p.remove_hook(h);
  if (std::uncaught_exceptions() > 0) {
    // Unwinding from an error: other ranks may not reach a collective, so do not start one.
    if (!finished_) HT_WARN("local_sgd: final average skipped while unwinding from an error");
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

std::string LocalSgd::describe() const {
  std::string out = fmt::format("local SGD every {} steps over {} replica(s), {} exchange{}", cfg_.steps,
                                cross_->size(), config::name_of(cfg_.comm_dtype),
                                cfg_.outer == config::OuterOptimizer::kDiloco
                                    ? fmt::format(", DiLoCo outer lr {} momentum {}", cfg_.outer_lr, cfg_.outer_momentum)
                                    : std::string(", plain average"));
  if (cfg_.fragments > 1) out += fmt::format(", streamed in {} fragments", cfg_.fragments);
  if (cfg_.overlap_steps > 0) out += fmt::format(", each overlapped with {} steps", cfg_.overlap_steps);
  if (cfg_.warmup_steps > 0) out += fmt::format(", after {} synchronous warmup steps", cfg_.warmup_steps);
  if (hierarchical()) out += fmt::format("; inside each group of {} ranks: {}", group_->size(), inner_->describe());
  return out;
}

const SyncStats& LocalSgd::stats() const {
  merged_ = stats_;
  for (const DataParallel* d : {inner_.get(), warmup_.get()}) {
    if (d == nullptr) continue;
    const SyncStats& s = d->stats();
    merged_.grad_allreduces += s.grad_allreduces;
    merged_.bytes_sent += s.bytes_sent;
    if (d == inner_.get() && hierarchical()) merged_.inner_bytes_sent += s.bytes_sent;
    merged_.comm_seconds += s.comm_seconds;
    merged_.buckets_in_backward += s.buckets_in_backward;
    merged_.staged_transfers += s.staged_transfers;
    if (s.bytes_per_grad_allreduce > 0) merged_.bytes_per_grad_allreduce = s.bytes_per_grad_allreduce;
  }
  for (const auto& f : fragments_) merged_.staged_transfers += f.exchange->staged_transfers();
  return merged_;
}

void LocalSgd::before_backward(bool last_micro_batch) {
  if (per_step_active()) per_step().before_backward(last_micro_batch);
}

void LocalSgd::after_backward() {
  if (!per_step_active()) return;
  per_step().after_backward();
  if (in_warmup() && warmup_shards_across_groups_) average_gradients_across_groups();
}

void LocalSgd::average_gradients_across_groups() {
  Stopwatch sw;
  std::vector<torch::Tensor> grads;
  for (const auto& p : optimizer().params())
    if (p.tensor.grad().defined()) grads.push_back(p.tensor.grad());
  if (grads.empty()) return;  // this rank's shard is all padding: so is its peers'
  if (!warmup_cross_avg_) {
    comm::AveragerOptions o;
    o.name = "gradient shards across groups (warmup)";
    o.bucket_mb = cfg_.bucket_mb;
    warmup_cross_avg_ = std::make_unique<comm::ParamAverager>(*cross_, grads, o);
  }
  warmup_cross_avg_->average(grads);
  stats_.grad_allreduces += 1;
  stats_.bytes_sent += warmup_cross_avg_->bytes_per_call();
  stats_.comm_seconds += sw.seconds();
}

double LocalSgd::clip_and_update(double max_norm) { return per_step().clip_and_update(max_norm); }

void LocalSgd::begin(Fragment& f, bool blocking) {
  Stopwatch sw;
  f.exchange->begin(blocking);
  f.steps_since = 0;
  f.age = 0;
  const uint64_t bytes = f.exchange->bytes_per_exchange();
  stats_.fragment_syncs += 1;
  stats_.bytes_sent += bytes;
  stats_.peak_bytes_per_exchange = std::max(stats_.peak_bytes_per_exchange, bytes);
  round_bytes_ += bytes;
  if (blocking) after_exchange(f, sw.seconds());
  stats_.comm_seconds += sw.seconds();
}

void LocalSgd::complete(Fragment& f) {
  Stopwatch sw;
  f.exchange->complete();
  after_exchange(f, sw.seconds());
  stats_.comm_seconds += sw.seconds();
}

// An average was applied: drift over every replica, the checksum, the moments when averaged.
void LocalSgd::after_exchange(const Fragment& f, double seconds) {
  const int64_t replicas = cross_->size();
  stats_.last_drift = std::sqrt(f.exchange->world_drift_squared() / static_cast<double>(replicas));
  stats_.last_checksum = f.exchange->last_checksum();
  if (cfg_.optimizer_state == config::OptimizerState::kAverage) average_moments();
  stats_.last_sync_seconds = seconds;
  HT_DEBUG("local_sgd: exchange at step {}: drift {:.4e}, checksum {:016x}", stats_.steps, stats_.last_drift,
           stats_.last_checksum);
}

void LocalSgd::record_round() {
  stats_.syncs += 1;
  stats_.bytes_last_sync = round_bytes_;
  round_bytes_ = 0;
}

void LocalSgd::average_moments() {
  auto moments = optimizer().all_moments();
  if (moments.empty()) return;  // before the first optimizer step, or an optimizer without moments
  if (!moment_avg_) {
    comm::AveragerOptions o;
    o.dtype = comm::is_quantized(exchange_dtype(cfg_.comm_dtype)) ? comm::ExchangeDType::kF32
                                                                  : exchange_dtype(cfg_.comm_dtype);
    o.bucket_mb = cfg_.bucket_mb;
    o.name = "optimizer moments";
    moment_avg_ = std::make_unique<comm::ParamAverager>(*cross_, moments, o);
  }
  moment_avg_->average(moments);
  round_bytes_ += moment_avg_->bytes_per_call();  // part of the round that began or completes now
  stats_.bytes_sent += moment_avg_->bytes_per_call();
}

void LocalSgd::after_update() {
  if (per_step_active()) per_step().after_update();  // Zero1's all-gather inside the group
  stats_.steps += 1;
  if (fragments_.empty()) return;
  if (stats_.steps <= cfg_.warmup_steps) {
    // The outer copies start from the warmed-up weights.
    if (stats_.steps == cfg_.warmup_steps)
      for (auto& f : fragments_) f.exchange->reset_outer();
    return;
  }
  finished_ = false;
  cycle_ += 1;
  for (auto& f : fragments_) {
    f.steps_since += 1;
    if (!f.exchange->pending()) continue;
    f.age += 1;
    if (f.age >= cfg_.overlap_steps)
      complete(f);
    else
      f.exchange->progress();  // progress without a progress thread
  }
  bool began = false;
  for (auto& f : fragments_)
    if (cycle_ == f.start) begin(f, cfg_.overlap_steps == 0), began = true;
  if (began) record_round();
  if (cycle_ == cfg_.steps) cycle_ = 0;
}

void LocalSgd::finish() {
  if (finished_ || fragments_.empty()) return;
  for (auto& f : fragments_)
    if (f.exchange->pending()) complete(f);
  bool began = false;
  for (auto& f : fragments_)
    if (f.steps_since > 0) begin(f, true), began = true;
  if (began) record_round();
  cycle_ = 0;
  finished_ = true;
}

double LocalSgd::measure_drift() {
  for (const auto& f : fragments_)
    HT_REQUIRE(!f.exchange->pending(), ExitCode::kRuntime, "local_sgd: measure_drift while an exchange is in flight");
  std::vector<torch::Tensor> params = sync_set_;
  comm::AveragerOptions o;
  o.name = "drift probe";
  comm::ParamAverager probe(comm_, params, o);
  probe.pack(params);
  auto local = probe.flat().clone();
  probe.allreduce_mean();
  const double sq = (local - probe.flat()).square().sum(torch::kDouble).item<double>();
  return std::sqrt(comm_.allreduce_sum(sq) / comm_.size());
}

std::unique_ptr<DataParallel> make_local_sgd(torch::nn::Module& model, comm::Communicator& comm,
                                             const config::Config& cfg) {
  const auto& l = cfg.local_sgd;
  check_world(cfg, comm.size(), comm.local_size());
  const int g = l.group_size == 0 ? comm.local_size() : static_cast<int>(l.group_size);
  std::unique_ptr<comm::Communicator> group, cross;
  if (g > 1) {
    const int color = l.group_size == 0 ? comm.node_leader() : comm.rank() / g;
    group = comm.split(color, comm.rank());
    cross = comm.split(group->rank(), comm.rank());
    // Every group must be as large as every other (nodes with different rank counts are not).
    const int64_t smallest = comm.allreduce_min(static_cast<int64_t>(group->size()));
    const int64_t largest = comm.allreduce_max(static_cast<int64_t>(group->size()));
    HT_REQUIRE(smallest == largest, ExitCode::kUsage,
               "config key 'local_sgd.group_size': groups of {} to {} ranks (the nodes hold different numbers of "
               "ranks); set local_sgd.group_size to a number that divides the job's ranks", smallest, largest);
  } else {
    group = comm::make_local();
  }
  if (cfg.train.shard_optimizer) {
    // check_world refused groups of one rank: each group is one replica, its ranks share its state.
    auto inner = std::make_unique<Zero1>(model, *group, cfg);
    return std::make_unique<LocalSgd>(model, comm, cfg, std::move(group), std::move(cross), std::move(inner),
                                      LocalSgd::Warmup{nullptr, /*shards_across_groups=*/true});
  }
  std::shared_ptr<Optimizer> opt = make_optimizer(cfg.train, optimizer_params(model));
  // The per-step strategy runs inside the groups every step, or on every rank during warmup only.
  config::Config inner_cfg = cfg;
  if (g == 1 && l.warmup_steps == 0) inner_cfg.local_sgd.overlap_grad_allreduce = false;  // never runs
  auto inner = std::make_unique<SyncAllReduce>(model, g > 1 ? *group : comm, inner_cfg, opt);
  LocalSgd::Warmup warmup;
  if (g > 1 && l.warmup_steps > 0) {
    config::Config w = cfg;
    w.local_sgd.overlap_grad_allreduce = false;  // the groups' strategy owns the gradient hooks
    warmup.world = std::make_unique<SyncAllReduce>(model, comm, w, opt);
  }
  return std::make_unique<LocalSgd>(model, comm, cfg, std::move(group), std::move(cross), std::move(inner),
                                    std::move(warmup));
}

}  // namespace ht::train
