#include "train/trainer.h"

#include <ATen/Context.h>

#include <fstream>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "comm/agree.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/signals.h"
#include "core/timer.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "recompute/recompute.h"
#include "train/attention_choice.h"
#include "train/auto_local_steps.h"
#include "train/best_tracker.h"
#include "train/data_parallel/data_parallel.h"
#include "train/evaluate.h"
#include "train/report/metrics.h"
#include "train/optimizer/schedule.h"
#include "train/report/plot.h"
#include "train/report/sample_log.h"
#include "train/start_weights.h"
#include "train/train_state.h"
#include "train/train_step.h"

namespace ht::train {

struct Trainer::Impl {
  config::Config cfg;
  std::shared_ptr<const data::Dataset> data;
  comm::Communicator& comm;
  torch::Device device{torch::kCPU};
  model::Gpt gpt{nullptr};
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<data::Loader> loader;
  std::unique_ptr<data::EvalReader> eval_reader;
  std::unique_ptr<DataParallel> dp;  // how the replicas stay in step; owns the optimizer
  std::unique_ptr<comm::Communicator> flags_comm;  // the step-flag agreement's own (comm::AnyFlags)
  std::unique_ptr<checkpoint::Manager> checkpoints;
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<BestTracker> best;
  bool stop_early = false;  // the last evaluation exhausted train.early_stopping_patience
  std::unique_ptr<SampleLogger> samples;
  Counters counters;
  int64_t total = 0;
  double peak_flops = 0.0;
  double flops_per_token = 0.0;
  std::string dataset_identity;  // of the data this run trains on, stored in its checkpoints
  std::string run_id;            // this run's lineage: kept across resumes, rotation deletes only its files
  PhaseClock clock;

  Impl(const RunSetup& s, comm::Communicator& c) : cfg(s.cfg), data(s.data), comm(c) {}

  StateRefs refs() { return StateRefs{gpt, *dp, *loader}; }

  void build(const ResumeRequest& resume);
  std::optional<checkpoint::Snapshot> load_resume_snapshot(const ResumeRequest& resume);
  void resume_from(const std::optional<checkpoint::Snapshot>& snap);
  void run_eval(const char* reason);
  void save_checkpoint(const char* reason, bool as_best = false);
  // One optimizer step; false when a non-finite loss stops the run.
  bool step(bool& signalled);
  int run();
};

void Trainer::Impl::build(const ResumeRequest& resume) {
  device = select_device(cfg.train, comm);
  if (cfg.train.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  memory::install_cpu_counter();
  if (cfg.train.retain_freed_memory && !memory::retain_freed_memory())
    HT_INFO("train.retain_freed_memory: this C library has no such setting; freed memory returns to the OS");
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  gpt = model::Gpt(model::GptOptions::from_config(cfg.model));
  load_start_weights(*gpt, cfg, resume, comm);  // before the strategy: it broadcasts rank 0's start
  gpt->to(device);
  recompute::apply(gpt, cfg.recompute);
  // Dropout streams differ per rank; the init above is identical on all ranks (and broadcast anyway).
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed) * 1000003ULL + static_cast<uint64_t>(comm.rank()) + 1);

  // Every rank opens its readers (no collective inside): a fault in the file ends the job once.
  comm::run_agreed(comm, [&] {
    loader = std::make_unique<data::Loader>(data, data::LoaderOptions::from_config(cfg), comm);
    if (cfg.eval.strategy != config::EvalStrategy::kNo)
      eval_reader = make_eval_reader(cfg, data, comm);
  });
  counters.global_batch = comm.size() * cfg.train.micro_batch_size * cfg.train.grad_accum_steps;
  total = cfg.train.max_steps > 0 ? cfg.train.max_steps : cfg.train.epochs * loader->steps_per_epoch();
  checkpoints = std::make_unique<checkpoint::Manager>(cfg.checkpoint_dir(), cfg.checkpoint.keep, comm);
  // Read before the strategy is built: local_sgd.steps = auto keeps the N the checkpoint ran with.
  const std::optional<checkpoint::Snapshot> snap = load_resume_snapshot(resume);
  const std::string attention = resolve_attention(cfg, device, snap);
  if (comm.rank() == 0 && !attention.empty()) HT_INFO("{}", attention);
  gpt->set_attention(cfg.model.attention);  // before local_sgd.steps = auto times a step
  resolve_local_steps(cfg, gpt, comm, device, total, snap);
  dp = make_data_parallel(*gpt, comm, cfg);
  flags_comm = comm.split(0, comm.rank());
  schedule = std::make_unique<LrSchedule>(cfg.train, total);
  best = std::make_unique<BestTracker>(cfg);
  flops_per_token = gpt->flops_per_token(cfg.model.seq_len);
  dataset_identity = data->identity();
  run_id = comm.broadcast_string(comm.rank() == 0 ? checkpoint::new_run_id() : std::string(), 0);
  peak_flops = resolve_peak_flops(cfg.train, device);
  start_phase_trace(clock, cfg, total, comm);
  // Last: the restored state (RNG streams included) is what the first step sees. A refused resume
  // ends the run before it has written anything.
  resume_from(snap);
  if (comm.rank() == 0) std::ofstream(cfg.train.output_dir + "/config.toml") << config::to_toml(cfg);
  const std::string metrics_path = cfg.train.output_dir + "/" + cfg.log.metrics_file;
  if (comm.rank() == 0 && counters.step > 0) truncate_metrics(metrics_path, counters.step);
  metrics = std::make_unique<MetricsWriter>(metrics_path, comm.rank() == 0,
                                            cfg.log.tensorboard ? cfg.train.output_dir : std::string());
  metrics->text("config", config::to_toml(cfg), counters.step);
  samples = std::make_unique<SampleLogger>(cfg, *data, comm.rank());
}

std::optional<checkpoint::Snapshot> Trainer::Impl::load_resume_snapshot(const ResumeRequest& resume) {
  if (!resume.from_file.empty()) return checkpoints->load(resume.from_file);
  if (!resume.latest) return std::nullopt;
  auto snap = checkpoints->load_latest();
  if (!snap) HT_INFO("--resume: no checkpoint in {}, starting from scratch", cfg.checkpoint_dir());
  return snap;
}

void Trainer::Impl::resume_from(const std::optional<checkpoint::Snapshot>& snap) {
  if (!snap) return;
  comm::run_agreed(comm, [&] {
    restore_state(refs(), counters, *snap, comm.size(), dataset_identity, cfg.checkpoint.allow_dataset_change);
  });
  if (!snap->run_id.empty()) run_id = snap->run_id;
  best->restore(*snap);
  HT_INFO("resumed at step {} ({} tokens seen, loader epoch {}, sample {})", counters.step, counters.tokens_seen,
          loader->state().epoch, loader->state().samples_consumed);
}

// Evaluates the averaged model without averaging the replicas (DataParallel::with_averaged_model).
// An improvement of checkpoint.best_metric is saved as the best checkpoint (the model just evaluated).
void Trainer::Impl::run_eval(const char* reason) {
  if (!eval_reader) return;
  EvalResult r;
  {
    PhaseClock::Scope phase(clock, Phase::kEval);
    Stopwatch sw;
    dp->with_averaged_model([&] { r = evaluate(gpt, *eval_reader, comm, device); });
    report_eval(*metrics, r, counters.step, loader->epoch(), counters.train_seconds, sw.seconds(), reason);
  }
  const BestTracker::Verdict v = best->observe(r, counters.step);
  stop_early = v.stop;
  if (v.new_best && cfg.checkpoint.keep_best) save_checkpoint("best", /*as_best=*/true);
}

// Passive: the file holds the averaged model and each replica; the training goes on unchanged.
void Trainer::Impl::save_checkpoint(const char* reason, bool as_best) {
  PhaseClock::Scope phase(clock, Phase::kCheckpoint);
  Stopwatch sw;
  checkpoint::Snapshot snap =
      capture_state(refs(), counters, RunInfo{config::to_toml(cfg), dataset_identity, run_id}, comm);
  best->store(snap);
  const auto path = as_best ? checkpoints->save_best(snap, counters.step) : checkpoints->save(snap, counters.step);
  HT_INFO("checkpoint ({}) written: {} in {:.2f}s", reason, path, sw.seconds());
}

bool Trainer::Impl::step(bool& signalled) {
  Stopwatch sw;
  memory::reset_cpu_peak();
  const int64_t live_before = memory::cpu_current_bytes();
  const double lr = schedule->apply(dp->optimizer(), counters.step);
  clock.set_step(counters.step + 1);
  // In place: backward accumulates into the existing gradient storage (the flat exchange buffer
  // when gradients are averaged) instead of allocating every gradient again each step.
  dp->zero_grad();
  // Started before the last backward, completed after the gradient exchange (train_step.h).
  std::optional<StepFlagAgreement> agreement;
  const AccumulatedLoss acc = accumulate_gradients(
      gpt, *loader, cfg.train.grad_accum_steps, device, cfg.train.autocast, clock,
      [&](bool last) { dp->before_backward(last); },
      [&](bool finite) {
        maybe_hold_for_signal(counters.step + 1);
        clock.time(Phase::kComm, [&] { agreement.emplace(finite, *flags_comm); });
      });
  maybe_inject_failure(comm.rank(), counters.step + 1);
  const int64_t peak_bytes = memory::cpu_peak_bytes() - live_before;
  // A skipped step's non-finite gradients are averaged and then dropped.
  clock.time(Phase::kComm, [&] { dp->after_backward(); });
  const StepFlags flags = agreement->wait(clock);
  signalled = flags.any_signal;
  if (flags.any_nonfinite) {
    if (cfg.train.nan_policy == config::NanPolicy::kSkip) {
      HT_WARN("step {}: non-finite loss on some rank; step skipped (train.nan_policy = skip)", counters.step);
      ++counters.step;
      counters.train_seconds += sw.seconds();
      clock.count_step();
      return true;
    }
    HT_ERROR("step {}: non-finite loss ({} on this rank); stopping. Last metrics line in {}/{}", counters.step + 1,
             acc.mean_loss, cfg.train.output_dir, cfg.log.metrics_file);
    return false;
  }
  double grad_norm = 0.0;
  clock.time(Phase::kOptimizer, [&] {
    grad_norm = dp->clip_and_update(cfg.train.grad_clip);
  });
  ++counters.step;
  clock.time(Phase::kComm, [&] { dp->after_update(); });
  clock.count_step();
  counters.tokens_seen += acc.tokens * comm.size();
  const double step_seconds = sw.seconds();
  counters.train_seconds += step_seconds;
  if (counters.step % cfg.log.every_steps == 0 || counters.step == 1 || counters.step == total) {
    const StepReport r{counters.step,      total,           acc.mean_loss,   lr,
                       grad_norm,          step_seconds,    acc.tokens * comm.size(), counters.tokens_seen,
                       peak_bytes,         flops_per_token, peak_flops,     comm.size(),
                       gather_phase_stats(clock, comm), dp->optimizer().state_bytes(), counters.train_seconds};
    report_step(*metrics, r, dp->stats());
  }
  return true;
}

int Trainer::Impl::run() {
  log_run_start(RunShape{cfg, gpt->num_parameters(), flops_per_token, device, comm.size(), counters.global_batch,
                         total, loader->steps_per_epoch(), peak_flops, dp->describe()});
  gpt->train();
  while (counters.step < total && !stop_early) {
    bool signalled = false;
    if (!step(signalled)) return static_cast<int>(ExitCode::kRuntime);
    samples->maybe_log(*gpt, counters.step);
    if (evaluation_due(cfg.eval, counters.step, loader->steps_per_epoch()))
      run_eval(cfg.eval.strategy == config::EvalStrategy::kSteps ? "steps" : "epoch end");
    if (signalled && !stop_early) {
      HT_WARN("signal {} received: checkpointing at step {} and exiting with code {} (requeue)",
              signals::last_signal_name(), counters.step, static_cast<int>(ExitCode::kRequeue));
      save_checkpoint("signal");
      return static_cast<int>(ExitCode::kRequeue);
    }
    if (cfg.checkpoint.every_steps > 0 && counters.step % cfg.checkpoint.every_steps == 0 && counters.step < total &&
        !stop_early)
      save_checkpoint("periodic");
  }
  dp->finish();
  if (stop_early) HT_INFO("{}; stopping at step {} of {}", best->stop_reason(), counters.step, total);
  else if (cfg.eval.strategy != config::EvalStrategy::kNo && !evaluation_due(cfg.eval, counters.step, loader->steps_per_epoch()))
    run_eval("end of training");
  if (cfg.checkpoint.save_final || stop_early) save_checkpoint(stop_early ? "early stopping" : "final");
  clock.finish_trace();
  HT_INFO("training finished: {} steps, {} tokens", counters.step, counters.tokens_seen);
  if (cfg.log.plot && comm.rank() == 0) plot_finished_run(cfg.train.output_dir, cfg.log.metrics_file);
  return 0;
}

Trainer::Trainer(const RunSetup& setup, comm::Communicator& comm, const ResumeRequest& resume)
    : impl_(std::make_unique<Impl>(setup, comm)) {
  signals::install();
  impl_->build(resume);
}

Trainer::~Trainer() = default;

int Trainer::run() { return impl_->run(); }

}  // namespace ht::train
