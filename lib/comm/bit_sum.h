// The sum of a buffer's raw bit patterns, the per-tensor part of comm::checksum, and the passes that
// add it up while they write the buffer. It is taken once per local-SGD exchange over the whole
// averaged buffer, so at small models it cost about as much as the collective itself (0.26 of
// 0.38 ms at the demo shape, scalar): the 32- and 16-bit widths have AVX2 and AVX-512 kernels,
// chosen at run time from the CPU, and it is added up in the pass that applies the 1/W scale to an
// fp32 mean (scale_summing_bits) or the outer step of an outer exchange (outer_step_summing_bits).
// Every path returns the same value (integer addition in any order), so checksums agree across
// ranks on different CPUs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ht::comm {

enum class BitSumPath { kScalar, kAvx2, kAvx512 };

// The fastest path this CPU runs.
BitSumPath best_bit_sum_path();
// The paths this CPU runs (kScalar always), for tests that compare each against the others.
std::vector<BitSumPath> supported_bit_sum_paths();
const char* name_of(BitSumPath path);

// Sum of the n elements at data read as signed integers of element_size bytes (1, 2, 4 or 8),
// each sign-extended to int64, added with 64-bit wrap-around.
int64_t sum_of_bits(const void* data, int64_t n, size_t element_size, BitSumPath path = best_bit_sum_path());

// data[i] *= scale for the n floats, returning sum_of_bits of the scaled values: the averaged
// buffer's 1/W pass and the checksum's read in one pass over the memory. The products are IEEE
// single-precision multiplications on every path, so the stored values match a plain loop's.
int64_t scale_summing_bits(float* data, int64_t n, float scale, BitSumPath path = best_bit_sum_path());

// The outer step of an outer exchange (DiLoCo's, or the plain one of int8 / int4 deltas) with the
// averaged pseudo-gradient g, then the copy of its result into the parameters and the checksum's
// read, in one pass over the n floats:
//   momentum > 0:  m = m x momentum + g,  u = nesterov ? g + momentum x m : m
//   otherwise:     u = g
//   global -= lr x u (with lr 1: global - u), then copy = global where copy is given (it may be g).
// g null: no step, the copy and the sum only. Returns sum_of_bits of the new global. Every path
// rounds each operation on its own, in this order (no fused multiply-add), so every CPU computes the
// same values; with lr 1 they are those of the ATen operations m.mul_(momentum).add_(g) and
// global.sub_(g + momentum * m).
struct OuterStepFactors {
  float lr = 1.0f;
  float momentum = 0.0f;
  bool nesterov = true;
};
int64_t outer_step_summing_bits(float* global, float* momentum, const float* g, float* copy, int64_t n,
                                OuterStepFactors f, BitSumPath path = best_bit_sum_path());

}  // namespace ht::comm
