#include "comm/quantize_cpu.h"

#include <ATen/Parallel.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>

namespace ht::comm {

namespace {

// Round half to even of |r| < 2^22 without a libm call: adding 1.5 x 2^23 leaves no fraction bits,
// so the sum is rounded to an integer as the FPU rounds (to nearest, ties to even). The files are
// compiled without -ffast-math, so the compiler keeps both operations.
constexpr float kRoundMagic = 12582912.0f;

// Blocks per parallel_for chunk: enough work to be worth a thread.
constexpr int64_t kGrain = 256;

float block_scale(float amax, float code_max) { return amax / code_max; }
float inverse(float scale) { return scale > 0.0f ? 1.0f / scale : 0.0f; }

// The largest |x| of a block as the bits of a non-negative float: ordered as the floats are, and a
// NaN's bits above every other, so a NaN in the block makes the result NaN (ATen's amax does too).
uint32_t scalar_abs_max_bits(const float* v, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, 4);
    bits &= 0x7fffffffu;
    m = bits > m ? bits : m;
  }
  return m;
}

int scalar_code(float v, float inv, float code_max) {
  float r = (v * inv + kRoundMagic) - kRoundMagic;
  r = r < -code_max ? -code_max : r;
  r = r > code_max ? code_max : r;
  return static_cast<int>(r);
}

void scalar_codes(const float* v, int64_t block, float inv, bool int4, uint8_t* out) {
  if (!int4) {
    for (int64_t i = 0; i < block; ++i)
      out[i] = static_cast<uint8_t>(static_cast<int8_t>(scalar_code(v[i], inv, 127.0f)));
    return;
  }
  for (int64_t i = 0; i < block; i += 2)
    out[i / 2] = static_cast<uint8_t>((scalar_code(v[i], inv, 7.0f) + 8) + 16 * (scalar_code(v[i + 1], inv, 7.0f) + 8));
}

void scalar_values(const uint8_t* c, int64_t block, float scale, bool int4, float* out, bool add) {
  auto put = [&](int64_t i, int q) {
    const float v = static_cast<float>(q) * scale;
    out[i] = add ? out[i] + v : v;
  };
  if (!int4) {
    for (int64_t i = 0; i < block; ++i) put(i, static_cast<int8_t>(c[i]));
    return;
  }
  for (int64_t i = 0; i < block; i += 2) {
    put(i, (c[i / 2] & 15) - 8);
    put(i + 1, (c[i / 2] >> 4) - 8);
  }
}

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Compiled for AVX2 without FMA: x x inv must be rounded to fp32 before the rounding add, as the
// generic path rounds it, so no multiply-add may be contracted.
__attribute__((target("avx2"))) uint32_t avx2_abs_max_bits(const float* v, int64_t n) {
  const __m256i mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m = _mm256_setzero_si256();
  for (int64_t i = 0; i < n; i += 8)
    m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), mask));
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xb1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(h));
}

// Eight codes as int32, rounded and clamped as scalar_code does.
__attribute__((target("avx2"))) __m256i avx2_codes8(const float* v, __m256 inv, __m256 code_max) {
  const __m256 magic = _mm256_set1_ps(kRoundMagic);
  __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v), inv), magic), magic);
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_sub_ps(_mm256_setzero_ps(), code_max)), code_max);
  return _mm256_cvttps_epi32(r);
}

__attribute__((target("avx2"))) void avx2_codes(const float* v, int64_t block, float inv_s, bool int4, uint8_t* out) {
  const __m256 inv = _mm256_set1_ps(inv_s);
  if (!int4) {
    const __m256 cm = _mm256_set1_ps(127.0f);
    // int32 -> int16 -> int8 saturating packs work within 128-bit lanes: bytes 0-3 of each lane
    // hold the lane's four codes; the permute puts both lanes' next to each other.
    const __m256i gather = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
    for (int64_t i = 0; i < block; i += 8) {
      __m256i q = avx2_codes8(v + i, inv, cm);
      q = _mm256_packs_epi32(q, q);
      q = _mm256_packs_epi16(q, q);
      q = _mm256_permutevar8x32_epi32(q, gather);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(q));
    }
    return;
  }
  const __m256 cm = _mm256_set1_ps(7.0f);
  const __m256i eight = _mm256_set1_epi32(8);
  // After the shift each 64-bit lane's low byte is (even code + 8) | (odd code + 8) << 4; the byte
  // shuffle gathers lanes 0 and 1 of each half into its first two bytes.
  const __m256i pick = _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 8, -1, -1, -1,
                                        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int64_t i = 0; i < block; i += 8) {
    const __m256i u = _mm256_add_epi32(avx2_codes8(v + i, inv, cm), eight);
    const __m256i pairs = _mm256_shuffle_epi8(_mm256_or_si256(u, _mm256_srli_epi64(u, 28)), pick);
    const uint32_t four = static_cast<uint32_t>(_mm256_extract_epi16(pairs, 0)) |
                          static_cast<uint32_t>(_mm256_extract_epi16(pairs, 8)) << 16;
    std::memcpy(out + i / 2, &four, 4);
  }
}

__attribute__((target("avx2"))) void avx2_values(const uint8_t* c, int64_t block, float scale_s, bool int4, float* out,
                                                 bool add) {
  const __m256 scale = _mm256_set1_ps(scale_s);
  const __m256i spread = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);  // low nibble first
  const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int64_t i = 0; i < block; i += 8) {
    __m256i q;
    if (!int4) {
      q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + i)));
    } else {
      int32_t four;
      std::memcpy(&four, c + i / 2, 4);
      const __m256i bytes = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi32_si128(four), twice));
      q = _mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(bytes, spread), _mm256_set1_epi32(15)),
                           _mm256_set1_epi32(8));
    }
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(q), scale);
    if (add) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
}
#pragma GCC diagnostic pop
#endif

bool use_vector(int64_t block, bool vector) { return vector && block % 8 == 0 && has_vector_quantize(); }

}  // namespace

bool has_vector_quantize() {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

void quantize_blocks(const float* x, int64_t n, int64_t block, bool int4, uint8_t* codes, uint8_t* scales,
                     bool vector) {
  const float code_max = int4 ? 7.0f : 127.0f;
  const bool simd = use_vector(block, vector);
  const int64_t code_bytes = int4 ? block / 2 : block;
  at::parallel_for(0, n / block, kGrain, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const float* v = x + b * block;
      uint8_t* out = codes + b * code_bytes;
      uint32_t bits = 0;
#if defined(__x86_64__)
      bits = simd ? avx2_abs_max_bits(v, block) : scalar_abs_max_bits(v, block);
#else
      bits = scalar_abs_max_bits(v, block);
#endif
      float amax;
      std::memcpy(&amax, &bits, 4);
      const float scale = block_scale(amax, code_max);
      std::memcpy(scales + b * 4, &scale, 4);
      if (!std::isfinite(scale)) {  // a NaN or an infinity: zero codes, the scale makes the block NaN
        std::memset(out, int4 ? 0x88 : 0, static_cast<size_t>(code_bytes));
        continue;
      }
#if defined(__x86_64__)
      if (simd) {
        avx2_codes(v, block, inverse(scale), int4, out);
        continue;
      }
#endif
      scalar_codes(v, block, inverse(scale), int4, out);
    }
  });
}

void dequantize_blocks(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, bool int4, float* y,
                       bool add, bool vector) {
  const bool simd = use_vector(block, vector);
  const int64_t code_bytes = int4 ? block / 2 : block;
  at::parallel_for(0, n / block, kGrain, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      float scale;
      std::memcpy(&scale, scales + b * 4, 4);
#if defined(__x86_64__)
      if (simd) {
        avx2_values(codes + b * code_bytes, block, scale, int4, y + b * block, add);
        continue;
      }
#endif
      scalar_values(codes + b * code_bytes, block, scale, int4, y + b * block, add);
    }
  });
}

}  // namespace ht::comm
