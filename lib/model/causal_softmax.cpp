#include "model/causal_softmax.h"

// See model/avx512.h: GCC 12's false warnings inside the intrinsics (here also from the
// _mm512_reduce_* sequences, which GCC reports as -Wuninitialized).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <ATen/Parallel.h>

#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/avx512.h"

namespace ht::model {
namespace {

using avx512::cpu_has_avx512_bf16;
using avx512::exp16;
using avx512::first_lanes;
using avx512::load16;
using avx512::store16;
using avx512::with_element_type;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Query i of a row sees n = i + 1 keys; the T - n past the diagonal get 0 (probabilities going
// forward, their gradients going back): all-zero bits in fp32 and bf16 alike.
template <typename T>
void zero_future(T* row, int64_t n, int64_t t) {
  std::memset(row + n, 0, static_cast<size_t>(t - n) * sizeof(T));
}

// softmax(x[0..n)) into y, in fp32 through `buf` (n floats), rounded once on the store.
template <typename T>
HT_AVX512_TARGET void softmax_row(const T* x, T* y, int64_t n, float* buf) {
  const int64_t full = n & ~int64_t{15};
  const __mmask16 tail = first_lanes(n - full);
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < full; j += 16) m = _mm512_max_ps(m, load16(x + j));
  if (tail) m = _mm512_mask_max_ps(m, tail, m, load16(x + full, tail));
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));
  __m512 s = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(load16(x + j), mx));
    _mm512_storeu_ps(buf + j, e);
    s = _mm512_add_ps(s, e);
  }
  if (tail) {
    const __m512 e = exp16(_mm512_sub_ps(load16(x + full, tail), mx));
    _mm512_mask_storeu_ps(buf + full, tail, e);
    s = _mm512_mask_add_ps(s, tail, s, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(s));
  for (int64_t j = 0; j < full; j += 16) store16(y + j, _mm512_mul_ps(_mm512_loadu_ps(buf + j), inv));
  if (tail) store16(y + full, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, buf + full), inv), tail);
}

// d softmax: gx = y (g - sum(g y)) over the n visible keys.
template <typename T>
HT_AVX512_TARGET void softmax_grad_row(const T* g, const T* y, T* gx, int64_t n) {
  const int64_t full = n & ~int64_t{15};
  const __mmask16 tail = first_lanes(n - full);
  __m512 d = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) d = _mm512_fmadd_ps(load16(g + j), load16(y + j), d);
  if (tail) d = _mm512_fmadd_ps(load16(g + full, tail), load16(y + full, tail), d);  // 0 lanes add 0
  const __m512 dot = _mm512_set1_ps(_mm512_reduce_add_ps(d));
  for (int64_t j = 0; j < full; j += 16)
    store16(gx + j, _mm512_mul_ps(load16(y + j), _mm512_sub_ps(load16(g + j), dot)));
  if (tail)
    store16(gx + full, _mm512_mul_ps(load16(y + full, tail), _mm512_sub_ps(load16(g + full, tail), dot)), tail);
}

// Rows are independent, so any split gives the same bits; a grain of ~32 K scores per task keeps
// small tensors on one thread.
int64_t row_grain(int64_t t) { return std::max<int64_t>(1, (int64_t{1} << 15) / t); }

torch::Tensor forward_avx512(const torch::Tensor& x) {
  const int64_t t = x.size(-1);
  const int64_t rows = x.numel() / t;
  torch::Tensor y = torch::empty_like(x, at::MemoryFormat::Contiguous);
  with_element_type(x, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* xp = x.const_data_ptr<T>();
    T* yp = y.mutable_data_ptr<T>();
    at::parallel_for(0, rows, row_grain(t), [&](int64_t b, int64_t e) {
      std::vector<float> buf(static_cast<size_t>(t));
      for (int64_t r = b; r < e; ++r) {
        const int64_t n = r % t + 1;
        softmax_row(xp + r * t, yp + r * t, n, buf.data());
        zero_future(yp + r * t, n, t);
      }
    });
  });
  return y;
}

torch::Tensor backward_avx512(const torch::Tensor& g, const torch::Tensor& y) {
  const int64_t t = y.size(-1);
  const int64_t rows = y.numel() / t;
  torch::Tensor gx = torch::empty_like(y, at::MemoryFormat::Contiguous);
  with_element_type(y, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* gp = g.const_data_ptr<T>();
    const T* yp = y.const_data_ptr<T>();
    T* op = gx.mutable_data_ptr<T>();
    at::parallel_for(0, rows, row_grain(t), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t n = r % t + 1;
        softmax_grad_row(gp + r * t, yp + r * t, op + r * t, n);
        zero_future(op + r * t, n, t);
      }
    });
  });
  return gx;
}

struct CausalSoftmaxFunction : torch::autograd::Function<CausalSoftmaxFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& scores) {
    torch::Tensor y = forward_avx512(scores);
    ctx->save_for_backward({y});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor y = ctx->get_saved_variables()[0];
    const torch::Tensor g = grad_outputs[0].contiguous();
    // With create_graph the gradient must itself be differentiable: ATen's is. Past the diagonal
    // y is 0, so its full-row formula gives the same 0 there.
    if (torch::GradMode::is_enabled() || g.scalar_type() != y.scalar_type())
      return {at::_softmax_backward_data(g, y, -1, y.scalar_type())};
    return {backward_avx512(g, y)};
  }
};

torch::Tensor aten_causal_softmax(torch::Tensor& scores) {
  const int64_t t = scores.size(-1);
  const auto future = torch::ones({t, t}, scores.options().dtype(torch::kBool)).triu(1);
  // Every row keeps its diagonal, so no row is all -inf.
  scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  return at::softmax(scores, -1);
}

}  // namespace

CausalSoftmaxPath causal_softmax_path(const torch::Tensor& scores) {
  const bool dtype_ok = scores.scalar_type() == at::kFloat || scores.scalar_type() == at::kBFloat16;
  const bool square = scores.dim() >= 2 && scores.size(-1) == scores.size(-2) && scores.size(-1) > 0;
  if (scores.device().is_cpu() && dtype_ok && square && scores.is_contiguous() && cpu_has_avx512_bf16())
    return CausalSoftmaxPath::kAvx512;
  return CausalSoftmaxPath::kAten;
}

const char* causal_softmax_path_name(CausalSoftmaxPath p) {
  return p == CausalSoftmaxPath::kAvx512 ? "avx512" : "aten";
}

torch::Tensor causal_softmax(torch::Tensor scores) {
  if (causal_softmax_path(scores) == CausalSoftmaxPath::kAten) return aten_causal_softmax(scores);
  if (!scores.requires_grad() || !torch::GradMode::is_enabled()) return forward_avx512(scores);
  return CausalSoftmaxFunction::apply(scores);
}

}  // namespace ht::model
