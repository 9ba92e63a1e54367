#include "model/gelu.h"

// GCC 12 warns that the intrinsics' internal _mm512_undefined_* values "may be used uninitialized"
// wherever they are inlined (GCC bug 105593, fixed in GCC 13); the values are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <ATen/Parallel.h>
#include <cpuid.h>
#include <immintrin.h>

#include <cstring>
#include <type_traits>

namespace ht::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every kernel below is compiled for AVX-512 with the bf16 conversions and runs only where
// cpu_has_avx512_bf16() says the CPU has both; the rest of the binary stays portable.
#define HT_GELU_TARGET __attribute__((target("avx512f,avx512bf16")))

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    // Not at::cpu::get_cpu_capabilities (what train::cpu_has_native_bf16 asks): its map has no
    // avx512f key in this libtorch. __builtin_cpu_supports("avx512f") also checks that the OS
    // saves the zmm registers;
    // AVX512_BF16 is CPUID leaf 7, sub-leaf 1, EAX bit 5.
    return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
  }();
  return has;
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// exp(z) by Cephes' expf scheme: z = n ln2 + r with |r| <= ln2/2, a degree-7 polynomial for e^r,
// scaled by 2^n with scalef, which gives inf past the float range and 0 below it.
HT_GELU_TARGET inline __m512 exp16(__m512 z) {
  z = _mm512_min_ps(_mm512_max_ps(z, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), z);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e), e = exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3).
struct Sigmoid2u {
  __m512 s, e;
};
HT_GELU_TARGET inline Sigmoid2u sigmoid_2u(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 u = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(kSqrt2OverPi)),
                                 _mm512_fmadd_ps(x2, _mm512_set1_ps(kCubic), _mm512_set1_ps(1.0f)));
  const __m512 e = exp16(_mm512_mul_ps(u, _mm512_set1_ps(-2.0f)));
  return {_mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e)), e};
}

HT_GELU_TARGET inline __m512 gelu16(__m512 x) { return _mm512_mul_ps(x, sigmoid_2u(x).s); }

// dy/dx = s + x s (1 - s) 2 du/dx, with 1 - s = e s (no cancellation where s is near 1)
// and 2 du/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2).
HT_GELU_TARGET inline __m512 gelu_grad16(__m512 x, __m512 g) {
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

HT_GELU_TARGET inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
HT_GELU_TARGET inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
HT_GELU_TARGET inline __m512 load16(const c10::BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// Round to nearest even, NaN kept a NaN: the rounding c10::BFloat16's conversion does.
HT_GELU_TARGET inline void store16(c10::BFloat16* p, __m512 v) {
  const __m256bh h = _mm512_cvtneps_pbh(v);
  std::memcpy(p, &h, sizeof(h));
}

// The elements after the last full vector go through a 16-wide buffer, so every element takes
// the same arithmetic whatever the length.
template <typename T>
HT_GELU_TARGET void forward_range(const T* x, T* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store16(y + i, gelu16(load16(x + i)));
  if (i == n) return;
  T xb[16] = {}, yb[16];
  std::memcpy(xb, x + i, (n - i) * sizeof(T));
  store16(yb, gelu16(load16(xb)));
  std::memcpy(y + i, yb, (n - i) * sizeof(T));
}

template <typename T>
HT_GELU_TARGET void backward_range(const T* g, const T* x, T* gx, int64_t n) {
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

// Calls f with a null pointer of x's element type (fp32 or bf16: gelu_path admits no other).
template <typename F>
void with_element_type(const torch::Tensor& x, F f) {
  if (x.scalar_type() == at::kFloat)
    f(static_cast<float*>(nullptr));
  else
    f(static_cast<c10::BFloat16*>(nullptr));
}

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
