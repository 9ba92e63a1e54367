#include "model/avx512.h"

#include <cpuid.h>

namespace ht::model::avx512 {

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    // Not at::cpu::get_cpu_capabilities (what train::cpu_has_native_bf16 asks): its map has no
    // avx512f key in this libtorch. __builtin_cpu_supports also checks that the OS saves the zmm
    // registers; AVX512_BF16 is CPUID leaf 7, sub-leaf 1, EAX bit 5.
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
  }();
  return has;
}

}  // namespace ht::model::avx512
