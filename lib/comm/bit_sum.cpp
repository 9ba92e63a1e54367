#include "comm/bit_sum.h"

#include <immintrin.h>

#include <cstring>

#include "core/error.h"

namespace ht::comm {

namespace {

// Wrap-around (unsigned) addition: the result does not depend on the order, so every path and
// every chunking agree bit for bit.
template <typename Int>
uint64_t scalar_sum(const Int* p, int64_t n) {
  uint64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<uint64_t>(static_cast<int64_t>(p[i]));
  return acc;
}

uint64_t scalar_scale_sum(float* p, int64_t n, float scale) {
  uint64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = p[i] * scale;
    p[i] = v;
    int32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    acc += static_cast<uint64_t>(static_cast<int64_t>(bits));
  }
  return acc;
}

// One element of outer_step_summing_bits; the vector kernels make the same operations lane-wise.
inline float outer_step_one(float* global, float* momentum, const float* g, float* copy, int64_t i,
                            const OuterStepFactors& f) {
  float v = global[i];
  if (g != nullptr) {
    float u = g[i];
    if (f.momentum != 0.0f) {
      const float m = momentum[i] * f.momentum + g[i];
      momentum[i] = m;
      u = f.nesterov ? g[i] + f.momentum * m : m;
    }
    if (f.lr != 1.0f) u = f.lr * u;
    v = v - u;
    global[i] = v;
  }
  if (copy != nullptr) copy[i] = v;
  return v;
}

uint64_t scalar_outer_step_sum(float* global, float* momentum, const float* g, float* copy, int64_t begin, int64_t n,
                               const OuterStepFactors& f) {
  uint64_t acc = 0;
  for (int64_t i = begin; i < n; ++i) {
    const float v = outer_step_one(global, momentum, g, copy, i, f);
    int32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    acc += static_cast<uint64_t>(static_cast<int64_t>(bits));
  }
  return acc;
}

#if defined(__x86_64__)
// GCC 12's intrinsic headers make their "undefined" vectors by initialising a variable from itself
// (`__Y = __Y`), which -Wuninitialized reports once those intrinsics are inlined into the kernels.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx2"))) uint64_t lanes_sum(__m256i v) {
  alignas(32) uint64_t lane[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lane), v);
  return lane[0] + lane[1] + lane[2] + lane[3];
}

// 4 x int32 -> 4 x int64 per convert; two accumulators hide the add latency.
__attribute__((target("avx2"))) uint64_t avx2_sum_i32(const int32_t* p, int64_t n) {
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a = _mm256_add_epi64(a, _mm256_cvtepi32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
    b = _mm256_add_epi64(b, _mm256_cvtepi32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 4))));
  }
  return lanes_sum(_mm256_add_epi64(a, b)) + scalar_sum(p + i, n - i);
}

// 16 x int16 -> two int32 sums of pairs (madd by 1), whose int32 range cannot overflow, then int64.
__attribute__((target("avx2"))) uint64_t avx2_sum_i16(const int16_t* p, int64_t n) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), ones);
    acc = _mm256_add_epi64(acc, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(pairs)));
    acc = _mm256_add_epi64(acc, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(pairs, 1)));
  }
  return lanes_sum(acc) + scalar_sum(p + i, n - i);
}

__attribute__((target("avx512f"))) uint64_t avx512_sum_i32(const int32_t* p, int64_t n) {
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a = _mm512_add_epi64(a, _mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i))));
    b = _mm512_add_epi64(b, _mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8))));
  }
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(a, b))) + scalar_sum(p + i, n - i);
}

__attribute__((target("avx512f,avx512bw"))) uint64_t avx512_sum_i16(const int16_t* p, int64_t n) {
  const __m512i ones = _mm512_set1_epi16(1);
  __m512i acc = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i pairs = _mm512_madd_epi16(_mm512_loadu_si512(p + i), ones);
    acc = _mm512_add_epi64(acc, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(pairs)));
    acc = _mm512_add_epi64(acc, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(pairs, 1)));
  }
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(acc)) + scalar_sum(p + i, n - i);
}

// The scaled values are stored and their bits, still in the register, summed as int32 -> int64.
__attribute__((target("avx2"))) uint64_t avx2_scale_sum(float* p, int64_t n, float scale) {
  const __m256 k = _mm256_set1_ps(scale);
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p + i), k);
    _mm256_storeu_ps(p + i, v);
    const __m256i bits = _mm256_castps_si256(v);
    a = _mm256_add_epi64(a, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(bits)));
    b = _mm256_add_epi64(b, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(bits, 1)));
  }
  return lanes_sum(_mm256_add_epi64(a, b)) + scalar_scale_sum(p + i, n - i, scale);
}

__attribute__((target("avx512f"))) uint64_t avx512_scale_sum(float* p, int64_t n, float scale) {
  const __m512 k = _mm512_set1_ps(scale);
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(p + i), k);
    _mm512_storeu_ps(p + i, v);
    const __m512i bits = _mm512_castps_si512(v);
    a = _mm512_add_epi64(a, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(bits)));
    b = _mm512_add_epi64(b, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(bits, 1)));
  }
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(a, b))) + scalar_scale_sum(p + i, n - i, scale);
}

__attribute__((target("avx2"))) uint64_t avx2_outer_step_sum(float* global, float* momentum, const float* g,
                                                              float* copy, int64_t n, const OuterStepFactors& f) {
  const __m256 mu = _mm256_set1_ps(f.momentum), lr = _mm256_set1_ps(f.lr);
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(global + i);
    if (g != nullptr) {
      const __m256 gv = _mm256_loadu_ps(g + i);
      __m256 u = gv;
      if (f.momentum != 0.0f) {
        const __m256 m = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(momentum + i), mu), gv);
        _mm256_storeu_ps(momentum + i, m);
        u = f.nesterov ? _mm256_add_ps(gv, _mm256_mul_ps(mu, m)) : m;
      }
      if (f.lr != 1.0f) u = _mm256_mul_ps(lr, u);
      v = _mm256_sub_ps(v, u);
      _mm256_storeu_ps(global + i, v);
    }
    if (copy != nullptr) _mm256_storeu_ps(copy + i, v);
    const __m256i bits = _mm256_castps_si256(v);
    a = _mm256_add_epi64(a, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(bits)));
    b = _mm256_add_epi64(b, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(bits, 1)));
  }
  return lanes_sum(_mm256_add_epi64(a, b)) + scalar_outer_step_sum(global, momentum, g, copy, i, n, f);
}

__attribute__((target("avx512f"))) uint64_t avx512_outer_step_sum(float* global, float* momentum, const float* g,
                                                                  float* copy, int64_t n, const OuterStepFactors& f) {
  const __m512 mu = _mm512_set1_ps(f.momentum), lr = _mm512_set1_ps(f.lr);
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(global + i);
    if (g != nullptr) {
      const __m512 gv = _mm512_loadu_ps(g + i);
      __m512 u = gv;
      if (f.momentum != 0.0f) {
        const __m512 m = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(momentum + i), mu), gv);
        _mm512_storeu_ps(momentum + i, m);
        u = f.nesterov ? _mm512_add_ps(gv, _mm512_mul_ps(mu, m)) : m;
      }
      if (f.lr != 1.0f) u = _mm512_mul_ps(lr, u);
      v = _mm512_sub_ps(v, u);
      _mm512_storeu_ps(global + i, v);
    }
    if (copy != nullptr) _mm512_storeu_ps(copy + i, v);
    const __m512i bits = _mm512_castps_si512(v);
    a = _mm512_add_epi64(a, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(bits)));
    b = _mm512_add_epi64(b, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(bits, 1)));
  }
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(a, b))) +
         scalar_outer_step_sum(global, momentum, g, copy, i, n, f);
}
#pragma GCC diagnostic pop
#endif

}  // namespace

BitSumPath best_bit_sum_path() {
#if defined(__x86_64__)
  static const BitSumPath best = __builtin_cpu_supports("avx512bw") ? BitSumPath::kAvx512
                                 : __builtin_cpu_supports("avx2")   ? BitSumPath::kAvx2
                                                                    : BitSumPath::kScalar;
  return best;
#else
  return BitSumPath::kScalar;
#endif
}

std::vector<BitSumPath> supported_bit_sum_paths() {
  std::vector<BitSumPath> paths{BitSumPath::kScalar};
  if (best_bit_sum_path() != BitSumPath::kScalar) paths.push_back(BitSumPath::kAvx2);
  if (best_bit_sum_path() == BitSumPath::kAvx512) paths.push_back(BitSumPath::kAvx512);
  return paths;
}

const char* name_of(BitSumPath path) {
  switch (path) {
    case BitSumPath::kAvx2: return "avx2";
    case BitSumPath::kAvx512: return "avx512";
    default: return "scalar";
  }
}

namespace {

template <typename Int, typename Avx2, typename Avx512>
uint64_t dispatch(const void* data, int64_t n, BitSumPath path, [[maybe_unused]] Avx2 avx2, [[maybe_unused]] Avx512 avx512) {
  const auto* p = static_cast<const Int*>(data);
#if defined(__x86_64__)
  if (path == BitSumPath::kAvx512) return avx512(p, n);
  if (path == BitSumPath::kAvx2) return avx2(p, n);
#endif
  return scalar_sum(p, n);
}

// A path the CPU lacks would end in SIGILL: refuse it with a message instead.
void require_runs(BitSumPath path, const char* what) {
  HT_REQUIRE(static_cast<int>(path) <= static_cast<int>(best_bit_sum_path()), ExitCode::kRuntime,
             "{}: this CPU does not run the {} path", what, name_of(path));
}

}  // namespace

int64_t sum_of_bits(const void* data, int64_t n, size_t element_size, BitSumPath path) {
  require_runs(path, "sum_of_bits");
  uint64_t s = 0;
  switch (element_size) {
    case 1: s = scalar_sum(static_cast<const int8_t*>(data), n); break;
#if defined(__x86_64__)
    case 2: s = dispatch<int16_t>(data, n, path, avx2_sum_i16, avx512_sum_i16); break;
    case 4: s = dispatch<int32_t>(data, n, path, avx2_sum_i32, avx512_sum_i32); break;
#else
    case 2: s = scalar_sum(static_cast<const int16_t*>(data), n); break;
    case 4: s = scalar_sum(static_cast<const int32_t*>(data), n); break;
#endif
    case 8: s = scalar_sum(static_cast<const int64_t*>(data), n); break;
    default: HT_FAIL(ExitCode::kRuntime, "sum_of_bits: element size {} is not 1, 2, 4 or 8", element_size);
  }
  return static_cast<int64_t>(s);
}

int64_t scale_summing_bits(float* data, int64_t n, float scale, BitSumPath path) {
  require_runs(path, "scale_summing_bits");
#if defined(__x86_64__)
  if (path == BitSumPath::kAvx512) return static_cast<int64_t>(avx512_scale_sum(data, n, scale));
  if (path == BitSumPath::kAvx2) return static_cast<int64_t>(avx2_scale_sum(data, n, scale));
#endif
  return static_cast<int64_t>(scalar_scale_sum(data, n, scale));
}

int64_t outer_step_summing_bits(float* global, float* momentum, const float* g, float* copy, int64_t n,
                                OuterStepFactors f, BitSumPath path) {
  require_runs(path, "outer_step_summing_bits");
  HT_REQUIRE(g == nullptr || f.momentum == 0.0f || momentum != nullptr, ExitCode::kRuntime,
             "outer_step_summing_bits: a momentum factor without a momentum buffer");
#if defined(__x86_64__)
  if (path == BitSumPath::kAvx512) return static_cast<int64_t>(avx512_outer_step_sum(global, momentum, g, copy, n, f));
  if (path == BitSumPath::kAvx2) return static_cast<int64_t>(avx2_outer_step_sum(global, momentum, g, copy, n, f));
#endif
  return static_cast<int64_t>(scalar_outer_step_sum(global, momentum, g, copy, 0, n, f));
}

}  // namespace ht::comm
