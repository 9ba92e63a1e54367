// Loader throughput vs the trainer's consumption for the demo model, in one run.
//   BM_TrainerConsumption: forward + backward + AdamW step of the demo GPT (4 layers, 4 heads,
//     d_model 128, seq_len 128, vocab 258) on micro-batches of 16 on the CPU: tokens/s consumed.
//   BM_LoaderThroughput: Loader::next() on 1 rank (seq_len 128, micro-batch 16, prefetch 4) over
//     the English fortunes prepared with the byte tokenizer: tokens/s delivered, and the ratio
//     loader / trainer as the counter `loader_over_trainer` (target >= 20). Argument: chunk cache
//     bytes (256 MiB: the default, the demo file stays cached; 0: every sample re-reads and
//     re-verifies its 64 KiB chunk, the cold random-access case of a dataset larger than the cache).
// The first benchmark's rate is kept so the second can report the ratio (run both, in this order).
// Set HT_BENCH_DATA=<file.h5> to read another prepared file.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdlib>

#include "comm/communicator.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "model/gpt.h"
#include "unit/test_data_fixtures.h"

namespace {

constexpr int64_t kSeqLen = 128, kMicro = 16;
double g_trainer_tokens_per_s = 0;

std::string dataset() {
  static const std::string path = [] {
    if (const char* p = std::getenv("HT_BENCH_DATA")) return std::string(p);
    ht::data::PrepareOptions o;
    o.inputs = {"/usr/share/games/fortunes"};
    o.output = ht::data::fixtures::make_temp_dir() + "/fortunes.h5";
    o.progress = false;
    ht::data::prepare(o);
    return o.output;
  }();
  return path;
}

void BM_TrainerConsumption(benchmark::State& state) {
  ht::model::GptOptions o;  // the demo model
  o.vocab_size = 258;
  o.n_layer = 4;
  o.n_head = 4;
  o.d_model = 128;
  o.max_seq_len = kSeqLen;
  ht::model::Gpt gpt(o);
  torch::optim::AdamW opt(gpt->parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(0.1));
  auto input = torch::randint(0, 258, {kMicro, kSeqLen}, torch::kInt64);
  auto target = torch::randint(0, 258, {kMicro, kSeqLen}, torch::kInt64);
  int64_t tokens = 0;
  ht::Stopwatch clock;
  for (auto _ : state) {
    opt.zero_grad();
    auto loss = ht::model::lm_loss(gpt->lm_logits(input), target);
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.item<float>());
    tokens += kMicro * kSeqLen;
  }
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["threads"] = at::get_num_threads();
  g_trainer_tokens_per_s = static_cast<double>(tokens) / clock.seconds();
}

void BM_LoaderThroughput(benchmark::State& state) {
  auto comm = ht::comm::make_local();
  ht::data::LoaderOptions lo;
  lo.seq_len = kSeqLen;
  lo.micro_batch = kMicro;
  lo.prefetch = 4;
  lo.cache_bytes = static_cast<size_t>(state.range(0));  // 0: one chunk, re-read and re-verified per sample
  ht::data::Loader loader(ht::data::Dataset::open(dataset()), lo, *comm);
  int64_t tokens = 0;
  ht::Stopwatch clock;
  for (auto _ : state) {
    auto b = loader.next();
    benchmark::DoNotOptimize(b.input.data_ptr());
    tokens += b.num_tokens;
  }
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  // Both rates in wall-clock time (the loader works on its own thread); run after the trainer.
  if (g_trainer_tokens_per_s > 0)
    state.counters["loader_over_trainer"] = static_cast<double>(tokens) / clock.seconds() / g_trainer_tokens_per_s;
  state.counters["samples_per_epoch"] = static_cast<double>(loader.samples_per_epoch());
}

}  // namespace

BENCHMARK(BM_TrainerConsumption)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();
BENCHMARK(BM_LoaderThroughput)->Arg(256 << 20)->Arg(0)->Unit(benchmark::kMicrosecond)->MinTime(3.0)->UseRealTime();

int main(int argc, char** argv) {
  ht::log::init(0, 1, ht::log::Level::kWarn);
  dataset();  // prepare outside the timed region
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
