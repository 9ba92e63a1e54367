// What the model's AVX-512 kernels (gelu.cpp, causal_softmax.cpp) share: the run-time CPU check, the
// target attribute, fp32/bf16 loads and stores of 16 lanes (whole or masked), and exp. Each kernel is
// compiled for AVX-512 with the bf16 conversions and runs only where cpu_has_avx512_bf16() says the CPU
// has them; the rest of the binary stays portable.
//
// Include only from a .cpp: GCC 12 warns that the intrinsics' internal _mm512_undefined_* values "may be
// used uninitialized" (or, inside _mm512_reduce_*, "are used uninitialized") wherever they are inlined
// (GCC bug 105593, fixed in GCC 13; the values are never read), so an including file turns off
// -Wmaybe-uninitialized (and -Wuninitialized where it reduces) before its kernels.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define HT_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ht::model::avx512 {

// AVX-512 F, BW and VL (the masked 16-bit loads) and AVX512_BF16, with the OS saving the zmm registers.
bool cpu_has_avx512_bf16();

// exp(z) by Cephes' expf scheme: z = n ln2 + r with |r| <= ln2/2, a degree-7 polynomial for e^r,
// scaled by 2^n with scalef, which gives inf past the float range and 0 below it. The clamp keeps a
// NaN (vmaxps/vminps return their second operand when either is NaN), so exp(NaN) is NaN.
HT_AVX512_TARGET inline __m512 exp16(__m512 z) {
  z = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), z));
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

HT_AVX512_TARGET inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
HT_AVX512_TARGET inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
HT_AVX512_TARGET inline __m512 load16(const c10::BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// Round to nearest even, NaN kept a NaN: the rounding c10::BFloat16's conversion does.
HT_AVX512_TARGET inline void store16(c10::BFloat16* p, __m512 v) {
  const __m256bh h = _mm512_cvtneps_pbh(v);
  std::memcpy(p, &h, sizeof(h));
}

// The lanes of `m` only; the others load as 0 and are not written (no access past them).
HT_AVX512_TARGET inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
HT_AVX512_TARGET inline void store16(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
HT_AVX512_TARGET inline __m512 load16(const c10::BFloat16* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
HT_AVX512_TARGET inline void store16(c10::BFloat16* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, (__m256i)_mm512_cvtneps_pbh(v));
}

// Calls f with a null pointer of x's element type, fp32 or bf16 (the kernels' callers admit no other).
template <typename F>
void with_element_type(const at::Tensor& x, F f) {
  if (x.scalar_type() == at::kFloat)
    f(static_cast<float*>(nullptr));
  else
    f(static_cast<c10::BFloat16*>(nullptr));
}

// The first n lanes (0 <= n < 16; none for 0).
inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

}  // namespace ht::model::avx512
