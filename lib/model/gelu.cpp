#include "model/gelu.h"

// See model/avx512.h: GCC 12's false warning inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <ATen/Parallel.h>

#include <cstring>
#include <type_traits>

#include "model/avx512.h"

namespace ht::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using avx512::cpu_has_avx512_bf16;
using avx512::exp16;
using avx512::load16;
using avx512::store16;
using avx512::with_element_type;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e), e = exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3).
struct Sigmoid2u {
  __m512 s, e;
};
HT_AVX512_TARGET inline Sigmoid2u sigmoid_2u(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 u = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(kSqrt2OverPi)),
                                 _mm512_fmadd_ps(x2, _mm512_set1_ps(kCubic), _mm512_set1_ps(1.0f)));
  const __m512 e = exp16(_mm512_mul_ps(u, _mm512_set1_ps(-2.0f)));
  return {_mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e)), e};
}

HT_AVX512_TARGET inline __m512 gelu16(__m512 x) { return _mm512_mul_ps(x, sigmoid_2u(x).s); }

// dy/dx = s + x s (1 - s) 2 du/dx, with 1 - s = e s (no cancellation where s is near 1)
// and 2 du/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2).
HT_AVX512_TARGET inline __m512 gelu_grad16(__m512 x, __m512 g) {
  const Sigmoid2u se = sigmoid_2u(x);
  const __m512 du2 = _mm512_mul_ps(_mm512_set1_ps(2.0f * kSqrt2OverPi),
                                   _mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(3.0f * kCubic),
                                                   _mm512_set1_ps(1.0f)));
  // 1 - s = e s, except where e overflowed (s = 0, e s = inf * 0 = NaN): there vminps, which returns
  // its second operand when the first is NaN, gives the limit 1.
  const __m512 one_minus_s = _mm512_min_ps(_mm512_mul_ps(se.e, se.s), _mm512_set1_ps(1.0f));
  const __m512 slope = _mm512_mul_ps(_mm512_mul_ps(se.s, one_minus_s), x);
  return _mm512_mul_ps(g, _mm512_fmadd_ps(slope, du2, se.s));
}

// The elements after the last full vector go through a 16-wide buffer, so every element takes
// the same arithmetic whatever the length.
template <typename T>
HT_AVX512_TARGET void forward_range(const T* x, T* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store16(y + i, gelu16(load16(x + i)));
  if (i == n) return;
  T xb[16] = {}, yb[16];
  std::memcpy(xb, x + i, (n - i) * sizeof(T));
  store16(yb, gelu16(load16(xb)));
  std::memcpy(y + i, yb, (n - i) * sizeof(T));
}

template <typename T>
HT_AVX512_TARGET void backward_range(const T* g, const T* x, T* gx, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store16(gx + i, gelu_grad16(load16(x + i), load16(g + i)));
  if (i == n) return;
  T xb[16] = {}, gb[16] = {}, ob[16];
  std::memcpy(xb, x + i, (n - i) * sizeof(T));
  std::memcpy(gb, g + i, (n - i) * sizeof(T));
  store16(ob, gelu_grad16(load16(xb), load16(gb)));
  std::memcpy(gx + i, ob, (n - i) * sizeof(T));
}

// Elementwise, so any split gives the same bits; the grain keeps small tensors on one thread.
constexpr int64_t kGrain = 1 << 15;

torch::Tensor forward_avx512(const torch::Tensor& x) {
  torch::Tensor y = torch::empty_like(x, at::MemoryFormat::Contiguous);
  with_element_type(x, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* xp = x.const_data_ptr<T>();
    T* yp = y.mutable_data_ptr<T>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) { forward_range(xp + b, yp + b, e - b); });
  });
  return y;
}

torch::Tensor backward_avx512(const torch::Tensor& g, const torch::Tensor& x) {
  torch::Tensor gx = torch::empty_like(x, at::MemoryFormat::Contiguous);
  with_element_type(x, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* gp = g.const_data_ptr<T>();
    const T* xp = x.const_data_ptr<T>();
    T* op = gx.mutable_data_ptr<T>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) { backward_range(gp + b, xp + b, op + b, e - b); });
  });
  return gx;
}

struct GeluTanhFunction : torch::autograd::Function<GeluTanhFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return forward_avx512(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor g = grad_outputs[0].contiguous();
    // With create_graph the gradient must itself be differentiable: ATen's formula is.
    if (torch::GradMode::is_enabled() || g.scalar_type() != x.scalar_type())
      return {at::gelu_backward(g, x, "tanh")};
    return {backward_avx512(g, x)};
  }
};

}  // namespace

GeluPath gelu_path(const torch::Tensor& x) {
  const bool dtype_ok = x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16;
  if (x.device().is_cpu() && dtype_ok && x.is_contiguous() && cpu_has_avx512_bf16()) return GeluPath::kAvx512;
  return GeluPath::kAten;
}

const char* gelu_path_name(GeluPath p) { return p == GeluPath::kAvx512 ? "avx512" : "aten"; }

torch::Tensor gelu_tanh(const torch::Tensor& x) {
  if (gelu_path(x) == GeluPath::kAten) return torch::gelu(x, "tanh");
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return forward_avx512(x);
  return GeluTanhFunction::apply(x);
}

}  // namespace ht::model
