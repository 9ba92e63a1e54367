// Checkpoint save and load times and file sizes (lib/checkpoint) for two model shapes:
//   demo:     4 layers, d_model 128, 4 heads, vocab 258, seq 128
//   gpt2_124m: 12 layers, d_model 768, 12 heads, vocab 50257, seq 1024
// The Snapshot holds a real ht::model::Gpt's parameters plus real AdamW moments (one AdamW step
// with random gradients), counters, a CPU RNG state per rank and the config text: what the
// trainer writes in data-parallel mode. Save = the whole crash-safe protocol (tmp, close, fsync,
// rename, fsync dir, latest). Load cold = the file's pages dropped from the page cache first
// (posix_fadvise DONTNEED after fsync), so it reads from the disk; load warm = from the cache.
// HT_BENCH_DIR=<dir> chooses where the files go (default /tmp).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "core/log.h"
#include "model/gpt.h"
#include "train/optimizer/optimizer.h"

namespace {

ht::model::GptOptions shape(int64_t which) {
  ht::model::GptOptions o;
  if (which == 0) {
    o.vocab_size = 258; o.n_layer = 4; o.n_head = 4; o.d_model = 128; o.max_seq_len = 128;
  } else {
    o.vocab_size = 50257; o.n_layer = 12; o.n_head = 12; o.d_model = 768; o.max_seq_len = 1024;
  }
  return o;
}

ht::checkpoint::Snapshot make_snapshot(int64_t which) {
  torch::manual_seed(0);
  ht::model::Gpt gpt(shape(which));
  ht::config::TrainConfig tc;
  auto opt = ht::train::make_optimizer(tc, ht::train::optimizer_params(*gpt));
  for (auto& p : gpt->parameters()) p.mutable_grad() = torch::randn_like(p);
  opt->step();
  ht::checkpoint::Snapshot s;
  for (const auto& p : gpt->named_parameters()) {
    s.tensors[ht::checkpoint::kParamPrefix + p.key()] = p.value().detach().clone();
    const auto* st = opt->state_of(p.value());
    if (!st) continue;
    for (size_t m = 0; m < st->moments.size(); ++m)
      s.tensors[ht::checkpoint::kOptimizerPrefix + opt->moment_names()[m] + "/" + p.key()] = st->moments[m].clone();
    s.tensors[ht::checkpoint::kOptimizerPrefix + "step/" + p.key()] = torch::tensor({st->step}, torch::kInt64);
  }
  s.ints["step"] = 1;
  s.ints["tokens_seen"] = 1 << 20;
  s.strings["config"] = "[model]\n# benchmark snapshot\n";
  s.per_rank["rng/cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  return s;
}

const ht::checkpoint::Snapshot& snapshot(int64_t which) {
  static ht::checkpoint::Snapshot s[2];
  if (s[which].tensors.empty()) s[which] = make_snapshot(which);
  return s[which];
}

std::string bench_dir(int64_t which) {
  const char* d = std::getenv("HT_BENCH_DIR");
  return std::string(d ? d : "/tmp") + "/ht-bench-checkpoint-" + std::to_string(::getpid()) + "-" +
         std::to_string(which);
}

double file_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) : 0.0;
}

void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void BM_Save(benchmark::State& state) {
  const auto& s = snapshot(state.range(0));
  auto comm = ht::comm::make_local();
  ht::checkpoint::Manager m(bench_dir(state.range(0)), 2, *comm);
  std::string path;
  int64_t step = 0;
  for (auto _ : state) path = m.save(s, ++step);
  const double bytes = file_bytes(path);
  state.counters["file_MB"] = bytes / 1e6;
  state.counters["MB_per_s"] = benchmark::Counter(bytes / 1e6 * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

void load_bench(benchmark::State& state, bool cold) {
  const auto& s = snapshot(state.range(0));
  auto comm = ht::comm::make_local();
  ht::checkpoint::Manager m(bench_dir(state.range(0)) + "-load", 2, *comm);
  const std::string path = m.save(s, 1);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_from_page_cache(path);
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(m.load(path));
  }
  const double bytes = file_bytes(path);
  state.counters["file_MB"] = bytes / 1e6;
  state.counters["MB_per_s"] = benchmark::Counter(bytes / 1e6 * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}
void BM_LoadCold(benchmark::State& state) { load_bench(state, true); }
void BM_LoadWarm(benchmark::State& state) { load_bench(state, false); }

// range(0): 0 = demo, 1 = GPT-2 124M shape.
BENCHMARK(BM_Save)->Arg(0)->Iterations(10)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LoadCold)->Arg(0)->Iterations(10)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LoadWarm)->Arg(0)->Iterations(10)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Save)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LoadCold)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LoadWarm)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  ht::log::init(0, 1, ht::log::Level::kWarn);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Leave nothing behind.
  for (int which : {0, 1})
    for (const std::string suffix : {"", "-load"}) {
      const std::string dir = bench_dir(which) + suffix;
      for (const auto& f : ht::checkpoint::list_checkpoints(dir)) ::unlink(f.c_str());
      ::unlink((dir + "/latest").c_str());
      ::rmdir(dir.c_str());
    }
  return 0;
}
