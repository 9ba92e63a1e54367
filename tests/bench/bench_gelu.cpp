// The tanh GELU, forward and backward, ATen's kernels against ours (lib/model/gelu.cpp: the AVX-512
// or the AVX2 path, whichever the CPU takes, named in the label), in fp32 and bf16, on the MLP
// activations of one demo-shape step (micro-batch 8 x 128 positions x 4*128 features: 524,288
// elements, one block) and of the larger shape (4 x 256 x 2048). Side by side in
// one run; the figure is the time per call. Run with one thread, as a rank of the comparison runs:
//   OMP_NUM_THREADS=1 build/bin/bench_gelu --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "model/gelu.h"

namespace {

enum Impl { kAten, kOurs };
enum Pass { kForward, kBackward };

void run(benchmark::State& state, Impl impl, Pass pass, at::ScalarType dtype) {
  torch::manual_seed(0);
  const int64_t n = state.range(0);
  const torch::Tensor x = (torch::randn({n}) * 3).to(dtype);
  const torch::Tensor g = torch::randn({n}).to(dtype);
  if (impl == kOurs) {
    if (ht::model::gelu_path(x) == ht::model::GeluPath::kAten) {
      state.SkipWithError("this CPU has no vector path for this dtype: ours would be ATen's");
      return;
    }
    state.SetLabel(ht::model::gelu_path_name(ht::model::gelu_path(x)));
  }
  // Ours' backward through autograd (one recorded forward, its backward run again and again), as
  // training runs it; ATen's is its backward kernel called directly.
  const torch::Tensor xg = x.clone().requires_grad_(true);
  const torch::Tensor y = ht::model::gelu_tanh(xg);
  for (auto _ : state) {
    if (pass == kForward) {
      benchmark::DoNotOptimize(impl == kOurs ? ht::model::gelu_tanh(x) : torch::gelu(x, "tanh"));
    } else if (impl == kAten) {
      benchmark::DoNotOptimize(at::gelu_backward(g, x, "tanh"));
    } else {
      benchmark::DoNotOptimize(torch::autograd::grad({y}, {xg}, {g}, /*retain_graph=*/true)[0]);
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}

}  // namespace

#define HT_GELU_CASES(dtype_name, dtype)                                                                             \
  BENCHMARK_CAPTURE(run, aten_forward_##dtype_name, kAten, kForward, dtype)->Arg(524288)->Arg(2097152);          \
  BENCHMARK_CAPTURE(run, ours_forward_##dtype_name, kOurs, kForward, dtype)->Arg(524288)->Arg(2097152);          \
  BENCHMARK_CAPTURE(run, aten_backward_##dtype_name, kAten, kBackward, dtype)->Arg(524288)->Arg(2097152);        \
  BENCHMARK_CAPTURE(run, ours_backward_##dtype_name, kOurs, kBackward, dtype)->Arg(524288)->Arg(2097152)

HT_GELU_CASES(fp32, at::kFloat);
HT_GELU_CASES(bf16, at::kBFloat16);

BENCHMARK_MAIN();
