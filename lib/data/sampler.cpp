#include "data/sampler.h"

#include <algorithm>
#include <numeric>

namespace ht::data {

uint64_t SplitMix64::below(uint64_t bound) {
  // Reject the top partial range so that every residue is equally likely.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
  uint64_t x = next();
  while (x >= limit) x = next();
  return x % bound;
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  SplitMix64 g(a ^ 0x6A09E667F3BCC908ull);
  const uint64_t ha = g.next();
  SplitMix64 h(ha ^ (b * 0xD1B54A32D192ED03ull + 0x243F6A8885A308D3ull));
  return h.next();
}

std::vector<int64_t> epoch_permutation(int64_t n, int64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (!shuffle || n < 2) return perm;
  SplitMix64 rng(mix_seed(static_cast<uint64_t>(seed), static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates, our own draws: same order everywhere
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

std::vector<int64_t> eval_subset(int64_t n, int64_t count, int64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  if (count <= 0 || count >= n) return idx;
  // A stream of its own (not the epoch permutations'): the subset stays fixed for the whole run.
  SplitMix64 rng(mix_seed(static_cast<uint64_t>(seed), 0x6576616c73756273ull));
  for (int64_t i = 0; i < count; ++i) {
    const auto j = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)));
    std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(j)]);
  }
  idx.resize(static_cast<size_t>(count));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<int64_t> micro_batch_indices(const std::vector<int64_t>& perm, const BatchGeometry& g, int64_t step,
                                         int64_t micro, int64_t rank) {
  const int64_t first = g.first_position(step, micro, rank);
  return std::vector<int64_t>(perm.begin() + first, perm.begin() + first + g.micro_batch);
}

}  // namespace ht::data
