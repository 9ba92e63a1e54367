#include "train/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <ATen/autocast_mode.h>

#include <cmath>
#include <fstream>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/signals.h"
#include "core/timer.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "recompute/recompute.h"
#include "train/local_sgd.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/train_state.h"

namespace ht::train {

torch::Device select_device(const config::TrainConfig& cfg, comm::Communicator& comm) {
  const bool cuda = torch::cuda::is_available();
  HT_REQUIRE(!(cfg.device == "cuda" && !cuda), ExitCode::kUsage,
             "train.device = cuda but libtorch sees no CUDA device on {}", comm.hostname());
  const int64_t threads =
      cfg.threads > 0 ? cfg.threads
                      : std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()) / comm.local_size());
  torch::set_num_threads(static_cast<int>(threads));
  if (cfg.device != "cpu" && cuda) {
    const int n = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(comm.local_rank() % n));
  }
  return torch::Device(torch::kCPU);
}

namespace {

// bf16 autocast on CUDA for the forward pass, restored on scope exit.
class AutocastScope {
 public:
  AutocastScope(bool enabled, const torch::Device& device) : enabled_(enabled && device.is_cuda()) {
    if (!enabled_) return;
    prev_ = at::autocast::is_autocast_enabled(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  }
  ~AutocastScope() {
    if (enabled_) at::autocast::set_autocast_enabled(at::kCUDA, prev_);
  }

 private:
  bool enabled_;
  bool prev_ = false;
};

// Samples per epoch / global batch, or max_steps.
int64_t total_steps(const config::Config& cfg, const data::Loader& loader) {
  return cfg.train.max_steps > 0 ? cfg.train.max_steps : cfg.train.epochs * loader.steps_per_epoch();
}

void ensure_dir(const std::string& dir) {
  fs::make_dirs(dir);
  HT_REQUIRE(::access(dir.c_str(), W_OK) == 0, ExitCode::kData, "{}: directory is not writable", dir);
}

// Test hook (documented in docs/config.md): HPCTRAIN_TEST_FAIL_RANK=R and HPCTRAIN_TEST_FAIL_STEP=S
// make rank R throw at step S, to prove that a failing rank ends the whole job without a hang.
void maybe_inject_failure(int rank, int64_t step) {
  static const char* r = std::getenv("HPCTRAIN_TEST_FAIL_RANK");
  static const char* s = std::getenv("HPCTRAIN_TEST_FAIL_STEP");
  if (r && s && std::atoi(r) == rank && std::atoll(s) == step)
    HT_FAIL(ExitCode::kRuntime, "injected failure on rank {} at step {} (HPCTRAIN_TEST_FAIL_RANK/STEP)", rank, step);
}

}  // namespace

struct Trainer::Impl {
  config::Config cfg;
  comm::Communicator& comm;
  torch::Device device{torch::kCPU};
  data::DatasetMeta meta;
  model::Gpt gpt{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<data::Loader> loader;
  std::unique_ptr<data::EvalReader> eval_reader;
  std::unique_ptr<LocalSgd> local_sgd;
  std::unique_ptr<checkpoint::Manager> checkpoints;
  std::unique_ptr<MetricsWriter> metrics;
  Counters counters;
  int64_t total = 0;
  double peak_flops = 0.0;
  double flops_per_token = 0.0;
  bool is_lm = true;

  Impl(const config::Config& c, comm::Communicator& cm) : cfg(c), comm(cm) {}

  StateRefs refs() {
    return StateRefs{gpt, *optimizer, *local_sgd, *loader,
                     cfg.local_sgd.enabled && cfg.local_sgd.optimizer_state == "local"};
  }

  void build(const ResumeRequest& resume);
  void resume_from(const ResumeRequest& resume);
  torch::Tensor micro_step_loss(const data::Batch& batch);
  // One optimizer step over grad_accum micro-batches; returns {mean loss, finite?}.
  std::pair<double, bool> train_step(int64_t& tokens);
  void log_step(double loss, double grad_norm, double lr, double seconds, int64_t tokens, int64_t peak_bytes);
  void run_eval(const char* reason);
  void save_checkpoint(const char* reason);
  int run();
};

config::Config resolve_with_dataset(const config::Config& in, data::DatasetMeta* meta_out) {
  config::Config cfg = in;
  HT_REQUIRE(!cfg.data.path.empty(), ExitCode::kUsage, "config key 'data.path' is empty: point it at a dataset file");
  const auto meta = data::read_meta(cfg.data.path);
  if (meta_out) *meta_out = meta;
  HT_REQUIRE(meta.task == cfg.model.task, ExitCode::kUsage, "model.task = {} but {} holds {} data", cfg.model.task,
             cfg.data.path, meta.task);
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = meta.vocab_size;
  data::check_vocab(meta, cfg.model.vocab_size);  // the one vocabulary check (also used by the loader)
  if (meta.task == "classification") {
    const auto labels = static_cast<int64_t>(meta.label_names.size());
    if (cfg.model.num_labels == 0) cfg.model.num_labels = labels;
    HT_REQUIRE(cfg.model.num_labels == labels, ExitCode::kUsage, "model.num_labels = {} but {} has {} labels",
               cfg.model.num_labels, cfg.data.path, labels);
    HT_REQUIRE(cfg.model.seq_len <= meta.seq_len, ExitCode::kUsage,
               "model.seq_len = {} exceeds the width {} of input_ids in {}", cfg.model.seq_len, meta.seq_len,
               cfg.data.path);
  }
  config::validate(cfg);
  ensure_dir(cfg.train.output_dir);
  return cfg;
}

void Trainer::Impl::build(const ResumeRequest& resume) {
  cfg = resolve_with_dataset(cfg, &meta);
  is_lm = meta.task == "causal-lm";
  device = select_device(cfg.train, comm);
  if (cfg.train.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  memory::install_cpu_counter();
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  gpt = model::Gpt(model::GptOptions::from_config(cfg.model));
  gpt->to(device);
  recompute::apply(gpt, cfg.recompute);
  // Dropout streams differ per rank; the init above is identical on all ranks (and broadcast anyway).
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed) * 1000003ULL + static_cast<uint64_t>(comm.rank()) + 1);

  optimizer = make_adamw(*gpt, cfg.train);
  local_sgd = std::make_unique<LocalSgd>(*gpt, *optimizer, comm, cfg.local_sgd);

  data::LoaderOptions lo;
  lo.path = cfg.data.path;
  lo.split = "train";
  lo.seq_len = cfg.model.seq_len;
  lo.micro_batch = cfg.train.micro_batch_size;
  lo.grad_accum = cfg.train.grad_accum_steps;
  lo.shuffle = cfg.data.shuffle;
  lo.seed = cfg.data.seed;
  lo.prefetch = cfg.data.prefetch_batches;
  loader = std::make_unique<data::Loader>(lo, comm);
  if (cfg.eval.strategy != "no")
    eval_reader = std::make_unique<data::EvalReader>(cfg.data.path, "val", cfg.model.seq_len, cfg.eval.batch_size, comm);

  counters.global_batch = comm.size() * cfg.train.micro_batch_size * cfg.train.grad_accum_steps;
  total = total_steps(cfg, *loader);
  schedule = std::make_unique<LrSchedule>(cfg.train, total);
  checkpoints = std::make_unique<checkpoint::Manager>(cfg.checkpoint_dir(), cfg.checkpoint.keep, comm);
  // Rank 0 writes every checkpoint (also the one a signal asks for): an unusable directory is a
  // set-up error now, not a failure after hours of training.
  if (comm.rank() == 0) checkpoint::prepare_directory(cfg.checkpoint_dir());
  resume_from(resume);

  metrics = std::make_unique<MetricsWriter>(cfg.train.output_dir + "/" + cfg.log.metrics_file, comm.rank() == 0);
  if (comm.rank() == 0) {
    std::ofstream(cfg.train.output_dir + "/config.toml") << config::to_toml(cfg);
  }
  flops_per_token = gpt->flops_per_token(cfg.model.seq_len);
  peak_flops = cfg.train.peak_flops > 0 ? cfg.train.peak_flops : measure_peak_flops(device);
  signals::install();
}

void Trainer::Impl::resume_from(const ResumeRequest& resume) {
  std::optional<checkpoint::Snapshot> snap;
  if (!resume.from_file.empty()) {
    snap = checkpoints->load(resume.from_file);
  } else if (resume.latest) {
    snap = checkpoints->load_latest();
    if (!snap) HT_INFO("--resume: no checkpoint in {}, starting from scratch", cfg.checkpoint_dir());
  }
  if (!snap) return;
  restore_state(refs(), counters, *snap);
  HT_INFO("resumed at step {} ({} tokens seen, loader epoch {}, sample {})", counters.step, counters.tokens_seen,
          loader->state().epoch, loader->state().samples_consumed);
}

torch::Tensor Trainer::Impl::micro_step_loss(const data::Batch& batch) {
  AutocastScope autocast(cfg.train.autocast == "bf16", device);
  auto input = batch.input.to(device);
  auto target = batch.target.to(device);
  if (is_lm) return model::lm_loss(gpt->lm_logits(input), target);
  auto logits = gpt->class_logits(input, batch.mask.to(device));
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), target);
}

std::pair<double, bool> Trainer::Impl::train_step(int64_t& tokens) {
  optimizer->zero_grad(/*set_to_none=*/!local_sgd->keep_gradients());
  double loss_sum = 0.0;
  const auto accum = cfg.train.grad_accum_steps;
  for (int64_t m = 0; m < accum; ++m) {
    data::Batch batch = loader->next();
    tokens += batch.num_tokens;
    auto loss = micro_step_loss(batch);
    // Scaled so that accumulated gradients equal those of one batch accum times larger.
    (loss / static_cast<double>(accum)).backward();
    loss_sum += loss.item<double>();
  }
  const double loss = loss_sum / static_cast<double>(accum);
  return {loss, std::isfinite(loss)};
}

void Trainer::Impl::log_step(double loss, double grad_norm, double lr, double seconds, int64_t tokens,
                             int64_t peak_bytes) {
  const double tokens_per_s = static_cast<double>(tokens) / seconds;  // global tokens
  const double mfu = flops_per_token * tokens_per_s / (peak_flops * comm.size());
  const auto& st = local_sgd->stats();
  const double eta_s = seconds * static_cast<double>(total - counters.step);
  HT_INFO("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad_norm {:.3f} | {:.0f} tok/s | MFU {:.1f}% | act peak {:.1f} MiB"
          " | eta {:.0f}s",
          counters.step, total, loss, lr, grad_norm, tokens_per_s, 100.0 * mfu,
          static_cast<double>(peak_bytes) / (1 << 20), eta_s);
  metrics->write({{"step", counters.step},
                  {"loss", loss},
                  {"lr", lr},
                  {"grad_norm", grad_norm},
                  {"tokens_per_s", tokens_per_s},
                  {"mfu", mfu},
                  {"tokens_seen", counters.tokens_seen},
                  {"step_seconds", seconds},
                  {"peak_step_bytes", peak_bytes},
                  {"peak_rss_bytes", memory::process_peak_rss_bytes()},
                  {"syncs", st.syncs},
                  {"grad_allreduces", st.grad_allreduces},
                  {"bytes_sent", st.bytes_sent},
                  {"bytes_per_step", counters.step > 0 ? static_cast<double>(st.bytes_sent) / counters.step : 0.0},
                  {"comm_seconds", st.comm_seconds},
                  {"drift", st.last_drift}});
}

void Trainer::Impl::run_eval(const char* reason) {
  if (!eval_reader) return;
  local_sgd->finish();  // evaluate one model: replicas are averaged first
  Stopwatch sw;
  const EvalResult r = evaluate(gpt, *eval_reader, comm, device, cfg.eval.max_batches);
  nlohmann::json line = {{"step", counters.step}, {"epoch", loader->epoch()},     {"eval_loss", r.loss},
                         {"eval_accuracy", r.accuracy}, {"eval_count", r.count}, {"eval_seconds", sw.seconds()}};
  if (is_lm) {
    line["eval_perplexity"] = r.perplexity;
    HT_INFO("eval ({}) step {} | eval_loss {:.4f} | perplexity {:.2f} | accuracy {:.4f} | {} tokens", reason,
            counters.step, r.loss, r.perplexity, r.accuracy, r.count);
  } else {
    line["eval_f1"] = r.f1;
    HT_INFO("eval ({}) step {} | eval_loss {:.4f} | accuracy {:.4f} | macro-F1 {:.4f} | {} samples", reason,
            counters.step, r.loss, r.accuracy, r.f1, r.count);
  }
  metrics->write(line);
}

void Trainer::Impl::save_checkpoint(const char* reason) {
  local_sgd->finish();  // replicas identical: rank 0 writes the model once
  Stopwatch sw;
  const auto path = checkpoints->save(capture_state(refs(), counters, config::to_toml(cfg), comm), counters.step);
  HT_INFO("checkpoint ({}) written: {} in {:.2f}s", reason, path, sw.seconds());
}

int Trainer::Impl::run() {
  HT_INFO("model: {} layers, d_model {}, {} heads, seq_len {}, vocab {}, {:.2f}M parameters, {:.1f} MFLOP/token",
          cfg.model.n_layer, cfg.model.d_model, cfg.model.n_head, cfg.model.seq_len, cfg.model.vocab_size,
          static_cast<double>(gpt->num_parameters()) / 1e6, flops_per_token / 1e6);
  HT_INFO("run: {} ranks, device {}, {} threads/rank, global batch {} samples, {} steps, {} steps/epoch, recompute "
          "{}, local_sgd {} (N={}), peak {:.1f} GFLOP/s per rank",
          comm.size(), device.str(), torch::get_num_threads(), counters.global_batch, total, loader->steps_per_epoch(),
          cfg.recompute.policy, cfg.local_sgd.enabled ? "on" : "off", cfg.local_sgd.steps, peak_flops / 1e9);
  gpt->train();
  const int64_t steps_per_epoch = loader->steps_per_epoch();
  while (counters.step < total) {
    Stopwatch sw;
    memory::reset_cpu_peak();
    const int64_t live_before = memory::cpu_current_bytes();
    int64_t tokens = 0;
    const double lr = schedule->apply(*optimizer, counters.step);
    auto [loss, finite] = train_step(tokens);
    maybe_inject_failure(comm.rank(), counters.step + 1);
    const int64_t peak_bytes = memory::cpu_peak_bytes() - live_before;
    // One tiny collective per step: any rank with a non-finite loss, any rank with a signal.
    int64_t flags[2] = {finite ? 0 : 1, signals::pending() ? 1 : 0};
    comm.allreduce(flags, 2, comm::DType::kI64, comm::ReduceOp::kMax);
    if (flags[0]) {
      if (cfg.train.nan_policy == "skip") {
        HT_WARN("step {}: non-finite loss on some rank; step skipped (train.nan_policy = skip)", counters.step);
        optimizer->zero_grad(true);
        ++counters.step;
        continue;
      }
      HT_ERROR("step {}: non-finite loss ({} on this rank); stopping. Last metrics line in {}/{}", counters.step + 1,
               loss, cfg.train.output_dir, cfg.log.metrics_file);
      return static_cast<int>(ExitCode::kRuntime);
    }
    local_sgd->after_backward();
    const double grad_norm = clip_grad_norm(*gpt, cfg.train.grad_clip);
    optimizer->step();
    ++counters.step;
    local_sgd->step();
    counters.tokens_seen += tokens * comm.size();
    if (counters.step % cfg.log.every_steps == 0 || counters.step == 1 || counters.step == total)
      log_step(loss, grad_norm, lr, sw.seconds(), tokens * comm.size(), peak_bytes);
    if (cfg.eval.strategy == "steps" && counters.step % cfg.eval.every_steps == 0) run_eval("steps");
    if (cfg.eval.strategy == "epoch" && steps_per_epoch > 0 && counters.step % steps_per_epoch == 0)
      run_eval("epoch end");
    if (flags[1]) {
      HT_WARN("signal {} received: checkpointing at step {} and exiting with code {} (requeue)",
              signals::last_signal_name(), counters.step, static_cast<int>(ExitCode::kRequeue));
      save_checkpoint("signal");
      return static_cast<int>(ExitCode::kRequeue);
    }
    if (cfg.checkpoint.every_steps > 0 && counters.step % cfg.checkpoint.every_steps == 0 && counters.step < total)
      save_checkpoint("periodic");
  }
  local_sgd->finish();
  const bool evaluated_last = (cfg.eval.strategy == "steps" && counters.step % std::max<int64_t>(1, cfg.eval.every_steps) == 0) ||
                              (cfg.eval.strategy == "epoch" && steps_per_epoch > 0 && counters.step % steps_per_epoch == 0);
  if (cfg.eval.strategy != "no" && !evaluated_last) run_eval("end of training");
  if (cfg.checkpoint.save_final) save_checkpoint("final");
  HT_INFO("training finished: {} steps, {} tokens", counters.step, counters.tokens_seen);
  return 0;
}

EvalResult evaluate_checkpoint(const config::Config& in, const std::string& checkpoint_path, comm::Communicator& comm) {
  config::Config cfg = resolve_with_dataset(in);
  const torch::Device device = select_device(cfg.train, comm);
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  model::Gpt gpt(model::GptOptions::from_config(cfg.model));
  checkpoint::Manager manager(cfg.checkpoint_dir(), cfg.checkpoint.keep, comm);
  const auto snap = manager.load(checkpoint_path);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : gpt->named_parameters()) {
      auto it = snap.tensors.find("model/" + p.key());
      HT_REQUIRE(it != snap.tensors.end() && it->second.sizes() == p.value().sizes(), ExitCode::kUsage,
                 "{}: parameter '{}' is missing or has another shape than the configured model", checkpoint_path,
                 p.key());
      p.value().copy_(it->second);
    }
  }
  gpt->to(device);
  data::EvalReader reader(cfg.data.path, "val", cfg.model.seq_len, cfg.eval.batch_size, comm);
  return evaluate(gpt, reader, comm, device, cfg.eval.max_batches);
}

Trainer::Trainer(const config::Config& cfg, comm::Communicator& comm, const ResumeRequest& resume)
    : impl_(std::make_unique<Impl>(cfg, comm)) {
  impl_->build(resume);
}

Trainer::~Trainer() = default;

int Trainer::run() { return impl_->run(); }

}  // namespace ht::train
