#include "train/report/metrics.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/timer.h"
#include "recompute/activation_memory.h"

namespace ht::train {

void report_step(MetricsWriter& metrics, const StepReport& r, const SyncStats& sync) {
  const double tokens_per_s = static_cast<double>(r.global_tokens) / r.step_seconds;
  const double mfu = r.flops_per_token * tokens_per_s / (r.peak_flops_per_rank * r.world_size);
  const double eta_s = r.step_seconds * static_cast<double>(r.total_steps - r.step);
  std::string phases;
  nlohmann::json phase_json = nlohmann::json::object();
  for (int i = 0; i < kNumPhases; ++i) {
    const auto k = static_cast<size_t>(i);
    phase_json[phase_name(static_cast<Phase>(i))] = {
        {"rank0", r.phases.mine[k]}, {"min", r.phases.min[k]}, {"median", r.phases.median[k]}, {"max", r.phases.max[k]}};
    if (r.phases.max[k] >= 5e-4)
      phases += fmt::format(" {} {:.0f}/{:.0f}", phase_name(static_cast<Phase>(i)), 1e3 * r.phases.median[k],
                            1e3 * r.phases.max[k]);
  }
  HT_INFO("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad_norm {:.3f} | {:.0f} tok/s | MFU {:.1f}% | act peak {:.1f} MiB"
          " | eta {:.0f}s | ms/step median/max over ranks:{}",
          r.step, r.total_steps, r.loss, r.lr, r.grad_norm, tokens_per_s, 100.0 * mfu,
          static_cast<double>(r.peak_step_bytes) / (1 << 20), eta_s, phases);
  metrics.write({{"step", r.step},
                 {"phase_s", phase_json},
                 {"loss", r.loss},
                 {"lr", r.lr},
                 {"grad_norm", r.grad_norm},
                 {"tokens_per_s", tokens_per_s},
                 {"mfu", mfu},
                 {"tokens_seen", r.tokens_seen},
                 {"step_seconds", r.step_seconds},
                 {"train_seconds", r.train_seconds},
                 {"ranks", r.world_size},
                 {"peak_step_bytes", r.peak_step_bytes},
                 {"peak_rss_bytes", memory::process_peak_rss_bytes()},
                 {"optimizer_state_bytes", r.optimizer_state_bytes},
                 {"syncs", sync.syncs},
                 {"grad_allreduces", sync.grad_allreduces},
                 {"bytes_sent", sync.bytes_sent},
                 {"bytes_per_step", r.step > 0 ? static_cast<double>(sync.bytes_sent) / r.step : 0.0},
                 {"comm_seconds", sync.comm_seconds},
                 {"drift", sync.last_drift},
                 {"fragment_syncs", sync.fragment_syncs},
                 {"inner_bytes_sent", sync.inner_bytes_sent},
                 {"peak_bytes_per_exchange", sync.peak_bytes_per_exchange},
                 {"buckets_in_backward", sync.buckets_in_backward},
                 {"staged_transfers", sync.staged_transfers}});
}

void report_eval(MetricsWriter& metrics, const EvalResult& r, int64_t step, int64_t epoch, double train_seconds,
                 double seconds, const char* reason) {
  nlohmann::json line = {{"step", step},           {"epoch", epoch},         {"eval_loss", r.loss},
                         {"eval_accuracy", r.accuracy}, {"eval_count", r.count}, {"eval_seconds", seconds},
                         {"eval_loss_stderr", r.loss_stderr}, {"eval_samples", r.samples},
                         {"train_seconds", train_seconds}};
  if (r.task == config::Task::kCausalLm) {
    line["eval_perplexity"] = r.perplexity;
    HT_INFO("eval ({}) step {} | eval_loss {:.4f} (stderr {:.4f} over {} sequences) | perplexity {:.2f} | accuracy "
            "{:.4f} | {} tokens", reason, step, r.loss, r.loss_stderr, r.samples, r.perplexity, r.accuracy, r.count);
  } else {
    line["eval_f1"] = r.f1;
    HT_INFO("eval ({}) step {} | eval_loss {:.4f} | accuracy {:.4f} | macro-F1 {:.4f} | {} samples", reason, step,
            r.loss, r.accuracy, r.f1, r.count);
  }
  metrics.write(line);
}

double measure_peak_flops(const torch::Device& device, torch::ScalarType dtype) {
  const int64_t n = device.is_cuda() ? 4096 : 1024;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12345);
  auto a = torch::randn({n, n}, gen, torch::kFloat).to(device, dtype);
  auto b = torch::randn({n, n}, gen, torch::kFloat).to(device, dtype);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  torch::mm(a, b);  // warm-up
  sync();
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    int iters = 0;
    Stopwatch sw;
    do {
      torch::mm(a, b);
      ++iters;
      sync();
    } while (sw.seconds() < 0.1);
    rates.push_back(2.0 * static_cast<double>(n) * n * n * iters / sw.seconds());
  }
  // The best run: on a shared machine slower runs measure the neighbours, not the hardware.
  return *std::max_element(rates.begin(), rates.end());
}

double resolve_peak_flops(const config::TrainConfig& train, const torch::Device& device) {
  if (train.peak_flops > 0) return train.peak_flops;
  return measure_peak_flops(device, train.autocast == config::Autocast::kBf16 ? torch::kBFloat16 : torch::kFloat);
}

void log_run_start(const RunShape& r) {
  const config::Config& cfg = r.cfg;
  HT_INFO("model: {} layers, d_model {}, {} heads, seq_len {}, vocab {}, {:.2f}M parameters, {:.1f} MFLOP/token",
          cfg.model.n_layer, cfg.model.d_model, cfg.model.n_head, cfg.model.seq_len, cfg.model.vocab_size,
          static_cast<double>(r.num_parameters) / 1e6, r.flops_per_token / 1e6);
  HT_INFO("run: {} ranks, device {}, {} threads/rank, precision {}, global batch {} samples, {} steps, {} "
          "steps/epoch, recompute {}, attention {}, {} {}, peak {:.1f} GFLOP/s per rank",
          r.world_size, r.device.str(), torch::get_num_threads(),
          cfg.train.autocast == config::Autocast::kBf16 ? "autocast bf16 (fp32 weights and optimizer)" : "fp32",
          r.global_batch, r.total_steps, r.steps_per_epoch, config::name_of(cfg.recompute.policy),
          config::name_of(cfg.model.attention), config::name_of(cfg.train.optimizer), cfg.local_sgd.enabled ? "local SGD" : "data parallel",
          r.peak_flops_per_rank / 1e9);
  HT_INFO("data parallel: {}", r.data_parallel);
  if (cfg.recompute.policy == config::RecomputePolicy::kNone) return;
  // The blocks' share is what a policy changes; the head's activations are the same either way.
  const recompute::ActivationShape shape{cfg.model.n_layer, cfg.model.d_model,         cfg.model.n_head,
                                         cfg.model.seq_len, cfg.train.micro_batch_size, cfg.model.vocab_size,
                                         cfg.model.dropout,  cfg.model.attention == config::AttentionKernel::kEager};
  config::RecomputeConfig none;
  const double with = recompute::predicted_activation_bytes(shape, cfg.recompute);
  const double without = recompute::predicted_activation_bytes(shape, none);
  constexpr double kMiB = 1024.0 * 1024.0;
  HT_INFO("recompute {}: activations per micro-batch {:.1f} MiB instead of {:.1f} MiB without recompute, {:.1f} MiB "
          "({:.0f}%) saved (predicted, fp32, docs/recompute.md; measured peak_step_bytes in the metrics)",
          config::name_of(cfg.recompute.policy), with / kMiB, without / kMiB, (without - with) / kMiB,
          100.0 * (without - with) / without);
}

}  // namespace ht::train
