// The int8 / int4 block quantization of comm/exchange.h on fp32 CPU buffers, in one pass per block
// each way and without temporaries: per block a read for its largest magnitude, then one for the
// codes; decoding one read of the codes writing (or adding to) the values. The arithmetic is that of
// the device-generic ATen chain in exchange.cpp, step for step in fp32 (scale = max|x| / code_max,
// codes = round half to even of x x (1 / scale), clamped; values = code x scale), so both write the
// same bytes and read back the same values (tests compare them). A block holding a NaN or an
// infinity gets a non-finite scale and all-zero codes: it decodes as NaN instead of hiding it.
#pragma once
#include <cstdint>

namespace ht::comm {

// The AVX2 kernels where the CPU has AVX2 and the block is a multiple of 8 values; plain loops
// otherwise. `vector = false` forces the plain loops (for tests).
bool has_vector_quantize();

// n values of x (a multiple of block) into codes (n or n / 2 bytes) and n / block fp32 scales
// (written as bytes: they may sit at any byte offset of the wire).
void quantize_blocks(const float* x, int64_t n, int64_t block, bool int4, uint8_t* codes, uint8_t* scales,
                     bool vector = true);
// The n values those encode, into y (add: y += values).
void dequantize_blocks(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, bool int4, float* y,
                       bool add, bool vector = true);

}  // namespace ht::comm
