// FNV-1a: the small, stable 64-bit hash behind the agreement checks across ranks and the dataset
// identity stored in checkpoints (not cryptographic; collisions are not an attack model here).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ht {

inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;
inline constexpr uint64_t kFnvPrime = 1099511628211ull;

inline uint64_t fnv1a(uint64_t hash, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= kFnvPrime;
  }
  return hash;
}
inline uint64_t fnv1a(uint64_t hash, const std::string& s) { return fnv1a(hash, s.data(), s.size()); }

}  // namespace ht
