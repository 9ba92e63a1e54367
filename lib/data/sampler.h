// Deterministic sample order for the Loader: a splitmix64 generator, a Fisher-Yates permutation
// of global sample indices seeded by (seed, epoch), and the position arithmetic that assigns
// permutation positions to (optimizer step, micro-step, rank). Pure functions: no I/O, no MPI.
#pragma once
#include <cstdint>
#include <vector>

namespace ht::data {

// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, fully specified, identical on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias (rejection sampling); bound > 0.
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

// Mixes two 64-bit values into one seed (used for (seed, epoch) and (seed, document index)).
uint64_t mix_seed(uint64_t a, uint64_t b);

// Permutation of [0, n) for (seed, epoch); identity when shuffle is false.
std::vector<int64_t> epoch_permutation(int64_t n, int64_t seed, int64_t epoch, bool shuffle);

// The validation subset of eval.max_batches: `count` distinct indices of [0, n), a seeded random
// draw (partial Fisher-Yates with our own generator, so the same on every platform) returned in
// increasing order. The whole range when count is 0 or >= n. Rank-independent by construction:
// callers split the result across ranks afterwards.
std::vector<int64_t> eval_subset(int64_t n, int64_t count, int64_t seed);

// Partition of the permutation into global batches of G = world * grad_accum * micro_batch.
struct BatchGeometry {
  int64_t world = 1;
  int64_t grad_accum = 1;
  int64_t micro_batch = 1;
  int64_t global_batch() const { return world * grad_accum * micro_batch; }
  // First permutation position of micro-step m of rank r in optimizer step b.
  int64_t first_position(int64_t step, int64_t micro, int64_t rank) const {
    return step * global_batch() + (micro * world + rank) * micro_batch;
  }
  // Whole optimizer steps in an epoch of n samples (the remainder < G is dropped).
  int64_t steps_per_epoch(int64_t n) const { return n / global_batch(); }
};

// The sample indices of one micro-batch of one rank, in permutation order.
std::vector<int64_t> micro_batch_indices(const std::vector<int64_t>& perm, const BatchGeometry& g, int64_t step,
                                         int64_t micro, int64_t rank);

}  // namespace ht::data
