#include "model/avx2.h"

namespace ht::model::avx2 {

bool cpu_has_avx2_fma() {
  // __builtin_cpu_supports also checks that the OS saves the ymm registers.
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

}  // namespace ht::model::avx2
