// The CPU's features as /proc/cpuinfo lists them: an independent reading against which a test checks
// that the model's AVX-512 kernels (lib/model/avx512.h) run where the CPU has what they need.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace ht::test {

inline bool cpuinfo_has(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (w == flag) return true;
    return false;
  }
  return false;
}

inline bool cpu_runs_avx512_kernels() {
  for (const char* flag : {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"})
    if (!cpuinfo_has(flag)) return false;
  return true;
}

}  // namespace ht::test

// Skips where the kernels cannot run; otherwise asserts that the tensor really takes them (`on_avx512`
// is the kernel's own path query), so a comparison after it is never ATen against itself.
#define HT_REQUIRE_AVX512_KERNEL(on_avx512, what)                                              \
  do {                                                                                         \
    if (!ht::test::cpu_runs_avx512_kernels())                                                  \
      GTEST_SKIP() << "this CPU lacks avx512f/bw/vl/bf16: " what " is ATen's here";            \
    ASSERT_TRUE(on_avx512);                                                                    \
  } while (0)
