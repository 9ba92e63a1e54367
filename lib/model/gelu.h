// GPT-2's tanh GELU (Hugging Face's gelu_new), y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// forward and backward. On a CPU, ATen evaluates it at ~2 ns per element in fp32 and bf16 alike,
// ~14 % of a demo-shape bf16 step (docs/benchmarks.md); one AVX-512 pass each way does the same
// arithmetic in fp32 about ten times faster. Written as y = x * sigmoid(2u): one exp and one division
// per element, and the limits (y -> 0 for x -> -inf, y -> x for x -> +inf) fall out of exp's own.
#pragma once
#include <torch/torch.h>

namespace ht::model {

enum class GeluPath { kAten, kAvx512 };

// Which implementation `gelu_tanh` takes for `x`: kAvx512 for a CPU tensor of fp32, or of bf16 where
// the CPU converts to bf16 natively (avx512_bf16), on a CPU with AVX-512; kAten otherwise (CUDA,
// other dtypes, older CPUs). Both compute in fp32 and round once to the tensor's dtype.
GeluPath gelu_path(const torch::Tensor& x);
const char* gelu_path_name(GeluPath p);

// The tanh GELU with its gradient. The input is kept for backward (as ATen's gelu keeps it), so
// activation memory is unchanged. A double backward (create_graph) goes through ATen's gelu_backward,
// which autograd can differentiate.
torch::Tensor gelu_tanh(const torch::Tensor& x);

}  // namespace ht::model
