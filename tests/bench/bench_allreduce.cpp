// Parameter averaging cost per sync, side by side in one run (mpirun -np 2):
//   fused      comm::ParamAverager::average (flatten -> one in-place MPI_Allreduce -> scale+unflatten)
//   fused_bound the same with the tensors stored in the flat buffer (bind): MPI_Allreduce + one scale pass
//   per_tensor one MPI_Allreduce per tensor on a clone, then divide and copy back (Accelerate's LocalSGD)
//   raw        one MPI_Allreduce of the same number of bytes on a preallocated buffer (the floor)
// for the demo model's parameters and a GPT-2-small-shaped set. Iteration counts are fixed (every
// rank must run the same collectives); each iteration starts after a barrier and its time is the
// maximum over ranks. Rank 0 prints the table and the ratios fused/raw and per_tensor/fused.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>

#include "comm/communicator.h"
#include "comm/param_averager.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/gpt.h"

namespace {

ht::comm::Communicator* g_comm = nullptr;
std::map<std::string, double> g_mean_seconds;  // "<set>/<method>" -> mean seconds per sync

struct ParamSet {
  std::string name;
  std::vector<torch::Tensor> tensors;
  int64_t numel = 0;
};

ParamSet make_set(const std::string& name, const ht::model::GptOptions& o) {
  torch::manual_seed(0);
  ht::model::Gpt gpt(o);
  ParamSet s{name, {}, 0};
  for (auto& p : gpt->parameters()) {
    s.tensors.push_back(p.detach());
    s.numel += p.numel();
  }
  return s;
}

std::map<std::string, ParamSet>& sets() {
  static std::map<std::string, ParamSet> s;
  return s;
}

// Times one sync: barrier, op, max over ranks.
template <class Op>
void timed_loop(benchmark::State& state, const std::string& key, Op op) {
  double total = 0;
  for (auto _ : state) {
    g_comm->barrier();
    ht::Stopwatch sw;
    op();
    const double s = g_comm->allreduce_max(sw.seconds());
    state.SetIterationTime(s);
    total += s;
  }
  g_mean_seconds[key] = total / static_cast<double>(state.iterations());
}

void set_counters(benchmark::State& state, const ParamSet& s, uint64_t bytes) {
  state.counters["tensors"] = static_cast<double>(s.tensors.size());
  state.counters["MiB"] = static_cast<double>(bytes) / (1 << 20);
  state.counters["GiB/s"] = benchmark::Counter(static_cast<double>(bytes) * state.iterations() / (1 << 30),
                                               benchmark::Counter::kIsRate);
}

ht::comm::ExchangeDType exchange_dtype(const std::string& name) {
  return name == "bf16" ? ht::comm::ExchangeDType::kBF16
                        : name == "fp16" ? ht::comm::ExchangeDType::kF16 : ht::comm::ExchangeDType::kF32;
}

void BM_Fused(benchmark::State& state, const std::string& set, const std::string& dtype, int64_t bucket_mb) {
  auto& s = sets().at(set);
  ht::comm::ParamAverager avg(*g_comm, s.tensors,
                              {exchange_dtype(dtype), bucket_mb, false, set});
  const std::string method = dtype == "fp32" ? (bucket_mb ? "fused_bucket" + std::to_string(bucket_mb) + "mb" : "fused")
                                             : "fused_" + dtype;
  timed_loop(state, set + "/" + method, [&] { avg.average(s.tensors); });
  set_counters(state, s, avg.bytes_per_call());
}

// Flat parameter storage: the tensors live in the averager's buffer (ParamAverager::bind), as
// the trainer's blocking local SGD keeps them. Own copies, so the other methods stay unbound.
void BM_FusedBound(benchmark::State& state, const std::string& set) {
  auto& s = sets().at(set);
  std::vector<torch::Tensor> mine;
  for (const auto& t : s.tensors) mine.push_back(t.clone());
  ht::comm::AveragerOptions o;
  o.name = set;
  ht::comm::ParamAverager avg(*g_comm, mine, o);
  if (!avg.bind(mine)) state.SkipWithError("bind refused the tensors");
  timed_loop(state, set + "/fused_bound", [&] { avg.average(mine); });
  set_counters(state, s, avg.bytes_per_call());
}

void BM_PerTensor(benchmark::State& state, const std::string& set) {
  auto& s = sets().at(set);
  const double inv = 1.0 / g_comm->size();
  timed_loop(state, set + "/per_tensor", [&] {
    for (auto& t : s.tensors) {
      auto c = t.clone();
      g_comm->allreduce(c.data_ptr(), static_cast<size_t>(c.numel()), ht::comm::DType::kF32, ht::comm::ReduceOp::kSum);
      t.copy_(c.mul_(inv));
    }
  });
  set_counters(state, s, static_cast<uint64_t>(s.numel) * 4);
}

void BM_Raw(benchmark::State& state, const std::string& set) {
  auto& s = sets().at(set);
  auto buf = torch::randn({s.numel});
  timed_loop(state, set + "/raw", [&] {
    g_comm->allreduce(buf.data_ptr(), static_cast<size_t>(s.numel), ht::comm::DType::kF32, ht::comm::ReduceOp::kSum);
  });
  set_counters(state, s, static_cast<uint64_t>(s.numel) * 4);
}

void register_set(const std::string& set, int iterations) {
  auto reg = [&](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark((set + "/" + name).c_str(), fn)
        ->Iterations(iterations)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  };
  // Order: raw first and last brackets the others (cache and page-fault warm-up shows up as a drift).
  reg("raw", [set](benchmark::State& st) { BM_Raw(st, set); });
  reg("fused", [set](benchmark::State& st) { BM_Fused(st, set, "fp32", 0); });
  reg("fused_bound", [set](benchmark::State& st) { BM_FusedBound(st, set); });
  reg("fused_bucket25mb", [set](benchmark::State& st) { BM_Fused(st, set, "fp32", 25); });
  reg("fused_bf16", [set](benchmark::State& st) { BM_Fused(st, set, "bf16", 0); });
  reg("per_tensor", [set](benchmark::State& st) { BM_PerTensor(st, set); });
}

void print_summary() {
  for (const auto& [name, s] : sets()) {
    auto get = [&](const char* m) { return g_mean_seconds.count(name + "/" + m) ? g_mean_seconds[name + "/" + m] : 0.0; };
    const double raw = get("raw"), fused = get("fused"), per = get("per_tensor");
    if (raw <= 0 || fused <= 0) continue;
    const double bound = get("fused_bound");
    std::printf("SUMMARY %-12s tensors=%zu params=%lld MiB=%.1f raw=%.3f ms fused=%.3f ms fused_bound=%.3f ms "
                "per_tensor=%.3f ms fused/raw=%.3f fused_bound/raw=%.3f per_tensor/fused_bound=%.2f "
                "bf16_fused=%.3f ms bucket25mb=%.3f ms\n",
                name.c_str(), s.tensors.size(), static_cast<long long>(s.numel), s.numel * 4.0 / (1 << 20),
                raw * 1e3, fused * 1e3, bound * 1e3, per * 1e3, fused / raw, bound / raw,
                bound > 0 ? per / bound : 0.0, get("fused_bf16") * 1e3, get("fused_bucket25mb") * 1e3);
  }
}

class QuietReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  ht::comm::MpiSession mpi(&argc, &argv);
  auto comm = ht::comm::make_mpi_world();
  g_comm = comm.get();
  ht::log::init(comm->rank(), comm->size(), ht::log::Level::kWarn);
  torch::set_num_threads(1);
  // HT_BENCH_BIG_VOCAB overrides the GPT-2-small vocabulary (50257) when memory is short.
  const char* vocab_env = std::getenv("HT_BENCH_BIG_VOCAB");
  const int64_t big_vocab = vocab_env ? std::atoll(vocab_env) : 50257;
  const char* iters_env = std::getenv("HT_BENCH_ITERS");
  const int iters = iters_env ? std::atoi(iters_env) : 5;
  sets()["demo"] = make_set("demo", ht::model::GptOptions{258, 4, 4, 128, 128, 0, 0.0, true});
  sets()["gpt2_small"] = make_set("gpt2_small", ht::model::GptOptions{big_vocab, 12, 12, 768, 1024, 0, 0.0, true});
  register_set("demo", iters * 20);
  register_set("gpt2_small", iters);
  benchmark::Initialize(&argc, argv);
  if (comm->rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    QuietReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  if (comm->rank() == 0) print_summary();
  benchmark::Shutdown();
  return 0;
}
