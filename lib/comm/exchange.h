// How values travel between ranks when they are averaged, and their encoding on the wire:
// fp32 as they are; bf16/fp16 rounded once; int8/int4 quantized with one fp32 scale per block of
// `block` values (symmetric, round to nearest: |error| <= scale / 2 = max|x of the block| / 254
// for int8 and / 14 for int4). Sums are always formed in fp32 after decoding.
// Wire layout of n values (n a multiple of the block for the integer types): the codes, then the
// scales. int4 packs two codes per byte, the even-indexed value in the low nibble.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace ht::comm {

enum class ExchangeDType { kF32, kBF16, kF16, kI8, kI4 };
std::string to_string(ExchangeDType t);

// The integer types carry one fp32 scale per block: chunks of a buffer must be multiples of it.
bool is_quantized(ExchangeDType t);
// Values a chunk must be a multiple of: the block for the integer types, 1 otherwise.
int64_t elems_multiple(ExchangeDType t, int64_t block);
// Bytes of n values on the wire (codes and scales).
uint64_t wire_bytes(ExchangeDType t, int64_t n, int64_t block);

// Encodes the fp32 values of src (n = src.numel()) into wire, a contiguous uint8 tensor of
// wire_bytes(t, n, block) bytes (a view into a larger wire buffer; any device).
void encode(const torch::Tensor& src, ExchangeDType t, int64_t block, const torch::Tensor& wire);
// Decodes n = dst.numel() values from wire into the contiguous fp32 dst (add: dst += values).
void decode(const torch::Tensor& wire, ExchangeDType t, int64_t block, const torch::Tensor& dst, bool add = false);
// encode and decode take a fused loop for fp32 CPU buffers in the integer types and these, a chain of
// ATen operations, for any device; both write the same bytes (tests compare them).
namespace detail {
void encode_generic(const torch::Tensor& src, ExchangeDType t, int64_t block, const torch::Tensor& wire);
void decode_generic(const torch::Tensor& wire, ExchangeDType t, int64_t block, const torch::Tensor& dst, bool add);
}  // namespace detail

}  // namespace ht::comm
