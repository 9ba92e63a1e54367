// The AVX2 + FMA counterpart of model/avx512.h for CPUs without AVX-512 with bf16 (AMD Zen 2/3, Intel
// before Cooper Lake, and Skylake/Cascade Lake servers, whose AVX-512 lacks the bf16 conversions):
// the run-time check, the target attribute, fp32 loads and stores of 8 lanes, and exp. fp32 only: on
// such CPUs hpctrain refuses bf16 autocast (train/train_step.h), so no bf16 tensor reaches a kernel.
//
// Include only from a .cpp, like model/avx512.h.
#pragma once
#include <immintrin.h>

#include <cstdint>

#define HT_AVX2_TARGET __attribute__((target("avx2,fma")))

namespace ht::model::avx2 {

// AVX2 and FMA, with the OS saving the ymm registers.
bool cpu_has_avx2_fma();

// 2^e for integer lanes e in [-126, 127], built as a float's exponent field.
HT_AVX2_TARGET inline __m256 pow2(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

// exp(z) by the scheme of avx512::exp16 (Cephes' expf: z = n ln2 + r, a degree-7 polynomial for e^r),
// with the same clamp. AVX2 has no scalef: 2^n is applied as two factors 2^(n/2) and 2^(n - n/2), each
// a normal float for n in [-150, 128], so the result overflows to inf and underflows to 0 where
// scalef's does (subnormal results may differ from scalef's in the last place). NaN stays NaN.
HT_AVX2_TARGET inline __m256 exp8(__m256 z) {
  z = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), z));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(z, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), z);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // A NaN z rounds to a NaN n whose integer conversion is INT_MIN; p is NaN already and stays so.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2(half)), pow2(_mm256_sub_epi32(ni, half)));
}

HT_AVX2_TARGET inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
HT_AVX2_TARGET inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }

}  // namespace ht::model::avx2
