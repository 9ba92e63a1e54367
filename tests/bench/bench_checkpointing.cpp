// Activation recompute (lib/recompute) cost and saving per training step on CPU, side by side in
// one run: policies none / full / every_k (k=2) / selective, for the demo model shape and a deeper
// one, with dropout 0 (the demo config) and 0.1, in fp32; and for the larger shape of the PyTorch
// comparison (4 x 512, seq 256), dropout 0, in fp32 and under bf16 autocast (train.autocast = bf16:
// the forward under CPU autocast, the backward outside it, as the trainer runs a step; bf16 is only
// representative in time on a CPU with native bf16, avx512_bf16 or AMX, which the table header
// says). Counters per benchmark: peak activation bytes of
// one step (counting CPU allocator: peak during forward+backward minus the bytes live before the
// forward, so weights and optimizer state are excluded; gradients, logits and the loss are in),
// the prediction of the per-layer formula of docs/recompute.md, and the step time (process CPU time
// is the figure compared: the shared build machine is oversubscribed, so wall time mostly measures
// other processes; wall time is printed too). Run with OMP_NUM_THREADS=1. After the run
// the binary prints a markdown table of medians with ratios to `none` of the same shape, dropout and
// precision. The per-layer prediction is the fp32 formula; it is not printed for bf16 rows.
//   OMP_NUM_THREADS=1 build/bin/bench_checkpointing --benchmark_repetitions=3
//   OMP_NUM_THREADS=1 build/bin/bench_checkpointing --benchmark_repetitions=3 --benchmark_filter=larger
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <map>

#include "core/memory.h"
#include "model/gpt.h"
#include "recompute/activation_memory.h"
#include "recompute/recompute.h"
#include "train/train_step.h"

namespace {

struct Shape {
  const char* name;
  int64_t n_layer, d_model, n_head, seq_len, batch, vocab;
};
const Shape kShapes[] = {{"demo", 4, 128, 4, 128, 16, 258},
                         {"deep", 8, 256, 4, 256, 8, 258},
                         {"larger", 4, 512, 8, 256, 4, 258}};
constexpr int kDeep = 1, kLarger = 2;  // indices into kShapes
// selective-keep-attn: selective with Options::recompute_attention_core = false.
const char* kPolicies[] = {"none", "full", "every_k", "selective", "selective-keep-attn"};
const double kDropouts[] = {0.0, 0.1};
const char* kPrecisions[] = {"fp32", "bf16"};

struct Samples {
  std::vector<double> seconds, cpu_seconds, fwd_cpu_seconds, peak_bytes;
  double predicted_bytes = 0;
};
std::map<std::string, Samples>& samples() {
  static std::map<std::string, Samples> s;
  return s;
}
std::string key(int shape, double dropout, int precision, const char* policy) {
  return std::string(kShapes[shape].name) + "/p" + (dropout > 0 ? "0.1" : "0") + "/" + kPrecisions[precision] + "/" +
         policy;
}

double predicted_bytes(const Shape& x, double dropout, const std::string& policy) {
  ht::config::RecomputeConfig cfg;
  cfg.attention_core = policy != "selective-keep-attn";
  cfg.policy = *ht::config::parse_enum<ht::config::RecomputePolicy>(cfg.attention_core ? policy : "selective");
  cfg.k = 2;
  return ht::recompute::predicted_activation_bytes(
      {x.n_layer, x.d_model, x.n_head, x.seq_len, x.batch, x.vocab, dropout}, cfg);
}

void BM_Step(benchmark::State& st) {
  const Shape& x = kShapes[st.range(0)];
  const double dropout = kDropouts[st.range(1)];
  const char* policy = kPolicies[st.range(2)];
  const int precision = static_cast<int>(st.range(3));
  const auto autocast = precision == 1 ? ht::config::Autocast::kBf16 : ht::config::Autocast::kNone;
  ht::memory::install_cpu_counter();
  ht::model::GptOptions o;
  o.vocab_size = x.vocab, o.n_layer = x.n_layer, o.n_head = x.n_head, o.d_model = x.d_model;
  o.max_seq_len = x.seq_len, o.dropout = dropout;
  torch::manual_seed(0);
  ht::model::Gpt m(o);
  m->train();
  ht::config::RecomputeConfig cfg;
  ht::recompute::Options opts;
  opts.recompute_attention_core = std::string(policy) != "selective-keep-attn";
  cfg.policy = *ht::config::parse_enum<ht::config::RecomputePolicy>(opts.recompute_attention_core ? policy
                                                                                                   : "selective");
  cfg.k = 2;
  ht::recompute::apply(m, cfg, opts);
  auto ids = torch::randint(x.vocab, {x.batch, x.seq_len + 1});
  auto in = ids.narrow(1, 0, x.seq_len).contiguous(), tgt = ids.narrow(1, 1, x.seq_len).contiguous();
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  double fwd_cpu = 0;  // CPU time of the forward alone: what a full recompute adds at most
  auto step = [&]() {
    m->zero_grad();
    const int64_t base = ht::memory::cpu_current_bytes();
    ht::memory::reset_cpu_peak();
    const double f0 = cpu_now();
    torch::Tensor loss;
    {
      ht::train::AutocastScope scope(autocast, torch::kCPU);
      loss = ht::model::lm_loss(m->lm_logits(in), tgt);
    }
    fwd_cpu = cpu_now() - f0;
    loss.backward();
    return static_cast<double>(ht::memory::cpu_peak_bytes() - base);
  };
  if (st.range(0) != kDeep) step();  // warm-up (skipped for the deep shape to fit the shared machine's time)
  Samples& out = samples()[key(static_cast<int>(st.range(0)), dropout, precision, policy)];
  out.predicted_bytes = predicted_bytes(x, dropout, policy);
  double peak = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    peak = step();
    out.cpu_seconds.push_back(cpu_now() - c0);
    out.fwd_cpu_seconds.push_back(fwd_cpu);
    out.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    out.peak_bytes.push_back(peak);
  }
  st.counters["peak_act_MiB"] = peak / (1 << 20);
  st.counters["predicted_MiB"] = out.predicted_bytes / (1 << 20);
  st.SetLabel(std::string(x.name) + " dropout=" + (dropout > 0 ? "0.1" : "0") + " " + kPrecisions[precision] + " " +
              policy);
}

// The name carries the shape and precision so that --benchmark_filter can pick one table.
void register_one(int s, int d, int p, int precision) {
  const std::string name = std::string("BM_Step/") + kShapes[s].name + "/" + kPrecisions[precision];
  benchmark::RegisterBenchmark(name.c_str(), BM_Step)
      ->Args({s, d, p, precision})
      ->Iterations(s == kDeep ? 1 : 2)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

void register_all() {
  for (int s = 0; s < kLarger; ++s)
    for (int d = 0; d < 2; ++d)
      for (int p = 0; p < 5; ++p) register_one(s, d, p, 0);
  for (int precision = 0; precision < 2; ++precision)
    for (int p = 0; p < 5; ++p) register_one(kLarger, 0, p, precision);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void print_table() {
  std::printf("\nbf16 rows: this CPU %s native bf16 (avx512_bf16 / amx_bf16)\n",
              ht::train::cpu_has_native_bf16() ? "has" : "has NO");
  std::printf("\n| shape | dropout | precision | policy | step CPU ms (median) | CPU time vs none | step wall ms (median) | "
              "peak act MiB (measured) | vs none | predicted MiB | predicted vs none | forward share of step |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int s = 0; s <= kLarger; ++s)
    for (double d : kDropouts)
      for (int precision = 0; precision < 2; ++precision) {
        static const Samples kNotRun;  // `none` filtered out: its ratios print as 0 / "-"
        const auto none_it = samples().find(key(s, d, precision, "none"));
        const Samples& none = none_it == samples().end() ? kNotRun : none_it->second;
        const double t0 = median(none.cpu_seconds), m0 = median(none.peak_bytes);
        for (const char* p : kPolicies) {
          auto it = samples().find(key(s, d, precision, p));
          if (it == samples().end() || it->second.seconds.empty()) continue;
          const Samples& x = it->second;
          const double t = median(x.cpu_seconds), w = median(x.seconds), m = median(x.peak_bytes);
          char predicted[64] = "-", predicted_ratio[32] = "-";
          if (precision == 0) std::snprintf(predicted, sizeof predicted, "%.1f", x.predicted_bytes / (1 << 20));
          if (precision == 0 && none.predicted_bytes > 0)
            std::snprintf(predicted_ratio, sizeof predicted_ratio, "%.0f%%",
                          100 * x.predicted_bytes / none.predicted_bytes);
          std::printf("| %s | %s | %s | %s | %.1f | %.2fx | %.1f | %.1f | %.0f%% | %s | %s | %.0f%% |\n",
                      kShapes[s].name, d > 0 ? "0.1" : "0", kPrecisions[precision], p, 1e3 * t,
                      t0 > 0 ? t / t0 : 0.0, 1e3 * w, m / (1 << 20), m0 > 0 ? 100 * m / m0 : 0.0, predicted,
                      predicted_ratio, t > 0 ? 100 * median(x.fwd_cpu_seconds) / t : 0.0);
        }
      }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_table();
  return 0;
}
