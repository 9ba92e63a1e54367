// The softmax of causal attention scores, forward and backward, for the eager attention core.
// Row i of a [..., T, T] score matrix belongs to query position i, which sees keys 0..i: the
// result is softmax(scores[..., i, 0..i]) there and 0 past the diagonal. ATen needs three passes
// over all T x T scores for it (the mask fill, the softmax, and the mask fill again on the way back);
// one pass each way over the lower triangle does half the exponentials and none of the mask traffic.
#pragma once
#include <torch/torch.h>

namespace ht::model {

enum class CausalSoftmaxPath { kAten, kAvx512 };

// kAvx512 for a contiguous CPU tensor of fp32, or of bf16 where the CPU converts to bf16 natively,
// whose last two dimensions are equal, on a CPU with AVX-512 (model/avx512.h); kAten otherwise.
// Both compute in fp32 and round once to the tensor's dtype.
CausalSoftmaxPath causal_softmax_path(const torch::Tensor& scores);
const char* causal_softmax_path_name(CausalSoftmaxPath p);

// softmax over the last dimension with the future (column > row) masked out; the result has the
// scores' dtype and shape and is kept for backward (as ATen's softmax keeps its result). ATen's path
// fills the future of `scores` with -inf in place (no second T x T tensor; a matmul's backward needs
// its inputs, not its output), so pass the scores as a temporary. A double backward (create_graph)
// goes through ATen's softmax backward. A NaN score makes its row's visible part NaN; the future stays 0
// (ATen's masked softmax spreads the NaN over the whole row).
torch::Tensor causal_softmax(torch::Tensor scores);

}  // namespace ht::model
