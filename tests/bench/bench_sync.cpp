// What a local-SGD sync costs next to the per-step gradient all-reduce of the same bytes, side by
// side in one run (mpirun -np 2), for the larger comparison shape (4 x 512, byte vocabulary:
// 12.9 M parameters, 51.5 MB fp32) and the demo shape:
//   grad_allreduce  SyncAllReduce::after_backward: the gradients live in the flat buffer (one
//                   MPI_Allreduce + one 1/W scaling pass)
//   lsgd_sync       LocalSgd with N = 1, one after_update() = one full sync as the trainer runs it
//                   (telemetry on, defaults: drift sample, checksum, consistency agreement)
//   lsgd_sync_int8  the same with local_sgd.comm_dtype = int8 (quantized delta exchange)
//   lsgd_sync_int4  and with int4
//   lsgd_sync_diloco  fp32 with local_sgd.outer = diloco (the outer Nesterov step on the averaged
//                   pseudo-gradient, the default outer lr and momentum)
//   paired          grad_allreduce and lsgd_sync alternating in one loop (the ratio to read)
// and the pieces of a sync:
//   pack            copying the parameters into the exchange buffer (what an unbound sync pays)
//   collective      one MPI_Allreduce of the same bytes on a preallocated buffer (the floor)
//   codec_int8/int4 one encode and one decode (adding) of the model's values as CPU buffers take them
//                   (comm::encode / decode, the fused loop), and *_generic the same through the ATen
//                   chain other devices take (comm::detail)
//   checksum        comm::checksum of the averaged buffer in a read of its own (what the sync
//                   saves by adding the bit sum up in its 1/W pass; encoded and outer exchanges pay it)
// Iteration counts are fixed (every rank runs the same collectives); each iteration starts after
// a barrier and counts the maximum over ranks. Rank 0 prints SUMMARY lines with the ratios.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>

#include "comm/communicator.h"
#include "comm/exchange.h"
#include "comm/param_averager.h"
#include "config/enum_names.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "train/data_parallel/data_parallel.h"

namespace {

ht::comm::Communicator* g_comm = nullptr;
std::map<std::string, double> g_mean_seconds;  // "<shape>/<case>" -> mean seconds

struct Shape {
  std::string name;
  ht::model::GptOptions options;
};

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

ht::config::Config config_of(bool local, ht::config::ExchangeDtype dtype,
                              ht::config::OuterOptimizer outer = ht::config::OuterOptimizer::kAverage) {
  ht::config::Config c;
  c.local_sgd.enabled = local;
  c.local_sgd.steps = 1;
  c.local_sgd.comm_dtype = dtype;
  c.local_sgd.outer = outer;
  return c;
}

void BM_GradAllreduce(benchmark::State& state, const Shape& shape) {
  torch::manual_seed(0);
  ht::model::Gpt gpt(shape.options);
  for (auto& p : gpt->parameters()) p.mutable_grad() = torch::randn_like(p);
  auto dp = ht::train::make_data_parallel(*gpt, *g_comm, config_of(false, ht::config::ExchangeDtype::kFp32));
  dp->after_backward();  // the first moves the gradients into the flat buffer
  timed_loop(state, shape.name + "/grad_allreduce", [&] { dp->after_backward(); });
  state.counters["MiB"] = static_cast<double>(dp->stats().bytes_per_grad_allreduce) / (1 << 20);
}

void BM_LocalSgdSync(benchmark::State& state, const Shape& shape, ht::config::ExchangeDtype dtype,
                     ht::config::OuterOptimizer outer = ht::config::OuterOptimizer::kAverage) {
  torch::manual_seed(0);
  ht::model::Gpt gpt(shape.options);
  auto dp = ht::train::make_data_parallel(*gpt, *g_comm, config_of(true, dtype, outer));
  std::string suffix = dtype == ht::config::ExchangeDtype::kFp32 ? "" : "_" + std::string(ht::config::name_of(dtype));
  if (outer != ht::config::OuterOptimizer::kAverage) suffix += "_" + std::string(ht::config::name_of(outer));
  const std::string key = shape.name + "/lsgd_sync" + suffix;
  timed_loop(state, key, [&] { dp->after_update(); });  // N = 1: every call is one sync
  state.counters["MiB"] = static_cast<double>(dp->stats().bytes_last_sync) / (1 << 20);
}

// The two above alternate inside one loop, one iteration each per round, so that whatever the
// machine does meanwhile (the other rank's scheduling on shared cores, cache state) falls on both
// alike: the ratio the summary prints comes from these pairs.
void BM_Paired(benchmark::State& state, const Shape& shape) {
  torch::manual_seed(0);
  ht::model::Gpt grad_model(shape.options), sync_model(shape.options);
  for (auto& p : grad_model->parameters()) p.mutable_grad() = torch::randn_like(p);
  auto grad_dp = ht::train::make_data_parallel(*grad_model, *g_comm, config_of(false, ht::config::ExchangeDtype::kFp32));
  auto sync_dp = ht::train::make_data_parallel(*sync_model, *g_comm, config_of(true, ht::config::ExchangeDtype::kFp32));
  grad_dp->after_backward();
  double grad_total = 0, sync_total = 0;
  auto timed = [&](auto op) {
    g_comm->barrier();
    ht::Stopwatch sw;
    op();
    return g_comm->allreduce_max(sw.seconds());
  };
  for (auto _ : state) {
    const double g = timed([&] { grad_dp->after_backward(); });
    const double s = timed([&] { sync_dp->after_update(); });
    state.SetIterationTime(g + s);
    grad_total += g;
    sync_total += s;
  }
  const auto n = static_cast<double>(state.iterations());
  g_mean_seconds[shape.name + "/paired_grad_allreduce"] = grad_total / n;
  g_mean_seconds[shape.name + "/paired_lsgd_sync"] = sync_total / n;
}

void BM_Pack(benchmark::State& state, const Shape& shape) {
  torch::manual_seed(0);
  ht::model::Gpt gpt(shape.options);
  auto params = gpt->parameters();
  ht::comm::AveragerOptions o;
  ht::comm::ParamAverager avg(*g_comm, params, o);
  timed_loop(state, shape.name + "/pack", [&] { avg.pack(params); });
}

void BM_Collective(benchmark::State& state, const Shape& shape) {
  torch::manual_seed(0);
  ht::model::Gpt gpt(shape.options);
  auto buf = torch::randn({gpt->num_parameters()});
  timed_loop(state, shape.name + "/collective", [&] {
    g_comm->allreduce(buf.data_ptr(), static_cast<size_t>(buf.numel()), ht::comm::DType::kF32, ht::comm::ReduceOp::kSum);
  });
}

void BM_Checksum(benchmark::State& state, const Shape& shape) {
  torch::manual_seed(0);
  ht::model::Gpt gpt(shape.options);
  auto buf = torch::randn({gpt->num_parameters()});
  uint64_t sink = 0;
  timed_loop(state, shape.name + "/checksum", [&] { sink ^= ht::comm::checksum({buf}); });
  benchmark::DoNotOptimize(sink);
}

void BM_Codec(benchmark::State& state, const Shape& shape, ht::comm::ExchangeDType dtype, bool generic) {
  torch::manual_seed(0);
  ht::model::Gpt gpt(shape.options);
  const int64_t block = 64;
  const int64_t n = gpt->num_parameters() / block * block;
  auto values = torch::randn({n}), sum = torch::zeros({n});
  auto wire = torch::empty({static_cast<int64_t>(ht::comm::wire_bytes(dtype, n, block))}, torch::kUInt8);
  const std::string key = shape.name + "/codec_" + ht::comm::to_string(dtype) + (generic ? "_generic" : "");
  timed_loop(state, key, [&] {
    if (generic) {
      ht::comm::detail::encode_generic(values, dtype, block, wire);
      ht::comm::detail::decode_generic(wire, dtype, block, sum, /*add=*/true);
    } else {
      ht::comm::encode(values, dtype, block, wire);
      ht::comm::decode(wire, dtype, block, sum, /*add=*/true);
    }
  });
}

void register_shape(const Shape& shape, int iterations) {
  auto reg = [&](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark((shape.name + "/" + name).c_str(), fn)
        ->Iterations(iterations)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  };
  reg("collective", [shape](benchmark::State& st) { BM_Collective(st, shape); });
  reg("grad_allreduce", [shape](benchmark::State& st) { BM_GradAllreduce(st, shape); });
  reg("lsgd_sync", [shape](benchmark::State& st) { BM_LocalSgdSync(st, shape, ht::config::ExchangeDtype::kFp32); });
  reg("lsgd_sync_int8", [shape](benchmark::State& st) { BM_LocalSgdSync(st, shape, ht::config::ExchangeDtype::kInt8); });
  reg("lsgd_sync_int4",
      [shape](benchmark::State& st) { BM_LocalSgdSync(st, shape, ht::config::ExchangeDtype::kInt4); });
  reg("lsgd_sync_diloco", [shape](benchmark::State& st) {
    BM_LocalSgdSync(st, shape, ht::config::ExchangeDtype::kFp32, ht::config::OuterOptimizer::kDiloco);
  });
  reg("paired", [shape](benchmark::State& st) { BM_Paired(st, shape); });
  reg("pack", [shape](benchmark::State& st) { BM_Pack(st, shape); });
  reg("checksum", [shape](benchmark::State& st) { BM_Checksum(st, shape); });
  for (const auto dtype : {ht::comm::ExchangeDType::kI8, ht::comm::ExchangeDType::kI4})
    for (const bool generic : {false, true})
      reg("codec_" + ht::comm::to_string(dtype) + (generic ? "_generic" : ""),
          [shape, dtype, generic](benchmark::State& st) { BM_Codec(st, shape, dtype, generic); });
  reg("grad_allreduce_again", [shape](benchmark::State& st) { BM_GradAllreduce(st, shape); });  // drift bracket
}

void print_summary(const std::vector<Shape>& shapes) {
  for (const auto& s : shapes) {
    auto get = [&](const char* m) { return g_mean_seconds.count(s.name + "/" + m) ? g_mean_seconds[s.name + "/" + m] : 0.0; };
    const double grad = get("grad_allreduce"), sync = get("lsgd_sync");
    const double paired_grad = get("paired_grad_allreduce"), paired_sync = get("paired_lsgd_sync");
    if (grad <= 0 && paired_grad <= 0) continue;
    std::printf("SUMMARY %-6s collective=%.2f ms grad_allreduce=%.2f ms lsgd_sync=%.2f ms lsgd_sync_int8=%.2f ms "
                "lsgd_sync_int4=%.2f ms lsgd_sync_diloco=%.2f ms pack=%.2f ms checksum=%.2f ms "
                "sync/grad_allreduce=%.3f paired: %.2f / %.2f ms = %.3f\n",
                s.name.c_str(), get("collective") * 1e3, grad * 1e3, sync * 1e3, get("lsgd_sync_int8") * 1e3,
                get("lsgd_sync_int4") * 1e3, get("lsgd_sync_diloco") * 1e3, get("pack") * 1e3, get("checksum") * 1e3, grad > 0 ? sync / grad : 0.0,
                paired_sync * 1e3, paired_grad * 1e3, paired_grad > 0 ? paired_sync / paired_grad : 0.0);
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
  // As the trainer does by default (train.retain_freed_memory): the temporaries of each case are
  // not handed back to the OS and faulted in again on the next iteration.
  ht::memory::retain_freed_memory();
  ht::log::init(comm->rank(), comm->size(), ht::log::Level::kWarn);
  const char* threads = std::getenv("HT_BENCH_THREADS");
  torch::set_num_threads(threads ? std::atoi(threads) : 1);
  const char* iters_env = std::getenv("HT_BENCH_ITERS");
  const int iters = iters_env ? std::atoi(iters_env) : 20;
  const std::vector<Shape> shapes = {{"larger", ht::model::GptOptions{258, 4, 8, 512, 256, 0, 0.0, true}},
                                     {"demo", ht::model::GptOptions{258, 4, 4, 128, 128, 0, 0.0, true}}};
  register_shape(shapes[0], iters);
  register_shape(shapes[1], iters * 10);
  benchmark::Initialize(&argc, argv);
  if (comm->rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    QuietReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  if (comm->rank() == 0) print_summary(shapes);
  benchmark::Shutdown();
  return 0;
}
