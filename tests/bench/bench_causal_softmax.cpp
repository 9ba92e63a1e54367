// The causal softmax of the eager attention core, forward and backward, ATen's masked fill and softmax
// against ours (lib/model/causal_softmax.cpp), in fp32 and bf16, on the scores of one block at the
// comparison runs' demo shape (micro-batch 8 x 4 heads x 128 x 128) and at the larger shape
// (4 x 8 heads x 256 x 256). Side by side in one run; the figure is the time per call. Run with one
// thread, as a rank of the comparison runs:
//   OMP_NUM_THREADS=1 build/bin/bench_causal_softmax --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <limits>

#include "model/causal_softmax.h"

namespace {

enum Impl { kAten, kOurs };
enum Pass { kForward, kBackward };

// What the eager attention ran before: the mask filled in place, then the softmax.
torch::Tensor aten_forward(torch::Tensor x, const torch::Tensor& future) {
  x.masked_fill_(future, -std::numeric_limits<double>::infinity());
  return at::softmax(x, -1);
}

void run(benchmark::State& state, Impl impl, Pass pass, at::ScalarType dtype) {
  torch::manual_seed(0);
  const int64_t batch = state.range(0), heads = state.range(1), t = state.range(2);
  const torch::Tensor x = (torch::randn({batch, heads, t, t}) * 3).to(dtype);
  const torch::Tensor g = torch::randn(x.sizes()).to(dtype);
  const torch::Tensor future = torch::ones({t, t}, torch::kBool).triu(1);
  if (impl == kOurs && ht::model::causal_softmax_path(x) != ht::model::CausalSoftmaxPath::kAvx512) {
    state.SkipWithError("this CPU lacks AVX-512 with bf16: ours would be ATen's");
    return;
  }
  // Both backwards through autograd (one recorded forward, its backward run again and again), as
  // training runs them: ATen's is the mask fill's backward after the softmax's.
  const torch::Tensor xg = x.clone().requires_grad_(true);
  const torch::Tensor y = impl == kOurs ? ht::model::causal_softmax(xg * 1) : aten_forward(xg * 1, future);
  for (auto _ : state) {
    if (pass == kForward) {
      // The copy is the matmul's fresh output in training; it costs the same on both sides.
      benchmark::DoNotOptimize(impl == kOurs ? ht::model::causal_softmax(x.clone()) : aten_forward(x.clone(), future));
    } else {
      benchmark::DoNotOptimize(torch::autograd::grad({y}, {xg}, {g}, /*retain_graph=*/true)[0]);
    }
  }
  state.SetItemsProcessed(state.iterations() * x.numel());
}

}  // namespace

#define HT_SOFTMAX_CASES(dtype_name, dtype)                                                                   \
  BENCHMARK_CAPTURE(run, aten_forward_##dtype_name, kAten, kForward, dtype)->Args({8, 4, 128})->Args({4, 8, 256}); \
  BENCHMARK_CAPTURE(run, ours_forward_##dtype_name, kOurs, kForward, dtype)->Args({8, 4, 128})->Args({4, 8, 256}); \
  BENCHMARK_CAPTURE(run, aten_backward_##dtype_name, kAten, kBackward, dtype)->Args({8, 4, 128})->Args({4, 8, 256}); \
  BENCHMARK_CAPTURE(run, ours_backward_##dtype_name, kOurs, kBackward, dtype)->Args({8, 4, 128})->Args({4, 8, 256})

HT_SOFTMAX_CASES(fp32, at::kFloat);
HT_SOFTMAX_CASES(bf16, at::kBFloat16);

BENCHMARK_MAIN();
