// GPT-2's tanh GELU (Hugging Face's gelu_new), y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// forward and backward. On a CPU, ATen evaluates it at ~2 ns per element in fp32 and bf16 alike,
// ~14 % of a demo-shape bf16 step (docs/benchmarks.md); one AVX-512 pass each way does the same
// arithmetic in fp32 about ten times faster. On a CPU with AVX2 only, ATen's fp32 GELU takes 4-7 ns
// per element, more than the matmul before it at the demo shape; an AVX2 pass does the same
// arithmetic 8 lanes wide. Written as y = x * sigmoid(2u): one exp and one division per element, and
// the limits (y -> 0 for x -> -inf, y -> x for x -> +inf) fall out of exp's own.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace ht::model {

enum class GeluPath { kAten, kAvx512, kAvx2 };

// The paths `gelu_tanh` can take for `x` on this CPU, fastest first, ATen's always last: kAvx512 for a
// contiguous CPU tensor of fp32, or of bf16 where the CPU converts to bf16 natively (avx512_bf16), on
// a CPU with AVX-512; kAvx2 for a contiguous CPU tensor of fp32 on a CPU with AVX2 and FMA (most
// x86-64 servers without AVX-512 bf16: AMD Zen 2/3, Intel Skylake/Cascade Lake). Each computes in
// fp32 and rounds once to the tensor's dtype; the two vector paths do the same arithmetic, 16 or 8
// lanes wide (their exp differs from each other only for subnormal results).
std::vector<GeluPath> gelu_paths(const torch::Tensor& x);
// The first of gelu_paths(x): the one gelu_tanh(x) takes.
GeluPath gelu_path(const torch::Tensor& x);
const char* gelu_path_name(GeluPath p);

// The tanh GELU with its gradient. The input is kept for backward (as ATen's gelu keeps it), so
// activation memory is unchanged. A double backward (create_graph) goes through ATen's gelu_backward,
// which autograd can differentiate.
torch::Tensor gelu_tanh(const torch::Tensor& x);
// The same through `path`, which must be one of gelu_paths(x) (tests compare the paths on one CPU).
torch::Tensor gelu_tanh_via(const torch::Tensor& x, GeluPath path);

}  // namespace ht::model
