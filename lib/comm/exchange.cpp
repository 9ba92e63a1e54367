// Wire encodings of averaged values (see exchange.h).
#include "comm/exchange.h"

#include "comm/quantize_cpu.h"
#include "core/error.h"

namespace ht::comm {

namespace {

torch::ScalarType float_wire_type(ExchangeDType t) {
  switch (t) {
    case ExchangeDType::kBF16: return torch::kBFloat16;
    case ExchangeDType::kF16: return torch::kHalf;
    default: return torch::kFloat;
  }
}

// Buffers the fused codec of comm/quantize_cpu.h takes; the ATen chain serves the rest.
bool cpu_fp32(const torch::Tensor& t) { return t.is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous(); }

int code_max(ExchangeDType t) { return t == ExchangeDType::kI8 ? 127 : 7; }

int64_t code_bytes(ExchangeDType t, int64_t n) { return t == ExchangeDType::kI8 ? n : n / 2; }

void check_wire(const torch::Tensor& wire, ExchangeDType t, int64_t n, int64_t block) {
  HT_REQUIRE(wire.scalar_type() == torch::kUInt8 && wire.dim() == 1 && wire.is_contiguous(), ExitCode::kRuntime,
             "comm: a wire buffer must be a contiguous 1-d uint8 tensor");
  HT_REQUIRE(!is_quantized(t) || n % block == 0, ExitCode::kRuntime,
             "comm: {} values are not a multiple of the quantization block {}", n, block);
  HT_REQUIRE(static_cast<uint64_t>(wire.numel()) == wire_bytes(t, n, block), ExitCode::kRuntime,
             "comm: {} values in {} take {} bytes, the wire buffer has {}", n, to_string(t), wire_bytes(t, n, block),
             wire.numel());
}

}  // namespace

std::string to_string(ExchangeDType t) {
  switch (t) {
    case ExchangeDType::kF32: return "fp32";
    case ExchangeDType::kBF16: return "bf16";
    case ExchangeDType::kF16: return "fp16";
    case ExchangeDType::kI8: return "int8";
    case ExchangeDType::kI4: return "int4";
  }
  return "?";
}

bool is_quantized(ExchangeDType t) { return t == ExchangeDType::kI8 || t == ExchangeDType::kI4; }

int64_t elems_multiple(ExchangeDType t, int64_t block) { return is_quantized(t) ? block : 1; }

uint64_t wire_bytes(ExchangeDType t, int64_t n, int64_t block) {
  const auto un = static_cast<uint64_t>(n);
  switch (t) {
    case ExchangeDType::kF32: return 4 * un;
    case ExchangeDType::kBF16:
    case ExchangeDType::kF16: return 2 * un;
    case ExchangeDType::kI8: return un + 4 * (un / static_cast<uint64_t>(block));
    case ExchangeDType::kI4: return un / 2 + 4 * (un / static_cast<uint64_t>(block));
  }
  return 0;
}

void encode(const torch::Tensor& src, ExchangeDType t, int64_t block, const torch::Tensor& wire) {
  const int64_t n = src.numel();
  check_wire(wire, t, n, block);
  if (n == 0) return;
  if (is_quantized(t) && cpu_fp32(src) && wire.is_cpu()) {
    auto* codes = wire.data_ptr<uint8_t>();
    quantize_blocks(src.data_ptr<float>(), n, block, t == ExchangeDType::kI4, codes, codes + code_bytes(t, n));
    return;
  }
  detail::encode_generic(src, t, block, wire);
}

void decode(const torch::Tensor& wire, ExchangeDType t, int64_t block, const torch::Tensor& dst, bool add) {
  const int64_t n = dst.numel();
  check_wire(wire, t, n, block);
  if (n == 0) return;
  if (is_quantized(t) && cpu_fp32(dst) && wire.is_cpu()) {
    const auto* codes = wire.data_ptr<uint8_t>();
    dequantize_blocks(codes, codes + code_bytes(t, n), n, block, t == ExchangeDType::kI4, dst.data_ptr<float>(), add);
    return;
  }
  detail::decode_generic(wire, t, block, dst, add);
}

namespace detail {

void encode_generic(const torch::Tensor& src, ExchangeDType t, int64_t block, const torch::Tensor& wire) {
  torch::NoGradGuard no_grad;
  const int64_t n = src.numel();
  check_wire(wire, t, n, block);
  if (n == 0) return;
  if (!is_quantized(t)) {
    wire.view(float_wire_type(t)).copy_(src.reshape({-1}));
    return;
  }
  auto rows = src.reshape({n / block, block});
  // scale = max|x| / code_max; an all-zero block keeps scale 0 and codes 0 (decodes to exact zeros).
  auto scale = rows.abs().amax(1).div_(static_cast<double>(code_max(t)));
  auto inv = torch::where(scale > 0, scale.reciprocal(), torch::zeros_like(scale));
  auto q = rows.mul(inv.unsqueeze(1)).round_().clamp_(-code_max(t), code_max(t)).to(torch::kInt16).reshape({-1});
  const int64_t cb = code_bytes(t, n);
  auto codes = wire.narrow(0, 0, cb);
  if (t == ExchangeDType::kI8) {
    codes.copy_(q.to(torch::kInt8).view(torch::kUInt8));
  } else {
    auto pairs = q.view({-1, 2}).add_(8);  // codes 0..15, two per byte
    codes.copy_(pairs.select(1, 0).add(pairs.select(1, 1), 16).to(torch::kUInt8));
  }
  // The scales follow the codes and may start at any byte: copied as bytes.
  wire.narrow(0, cb, n / block * 4).copy_(scale.contiguous().view(torch::kUInt8));
}

void decode_generic(const torch::Tensor& wire, ExchangeDType t, int64_t block, const torch::Tensor& dst, bool add) {
  torch::NoGradGuard no_grad;
  const int64_t n = dst.numel();
  check_wire(wire, t, n, block);
  if (n == 0) return;
  auto out = dst.view({-1});
  if (!is_quantized(t)) {
    auto in = wire.view(float_wire_type(t));
    if (add) out.add_(in);
    else out.copy_(in);
    return;
  }
  const int64_t cb = code_bytes(t, n);
  auto codes = wire.narrow(0, 0, cb);
  auto scale = wire.narrow(0, cb, n / block * 4).clone().view(torch::kFloat);  // clone: aligned for floats
  torch::Tensor q;
  if (t == ExchangeDType::kI8) {
    q = codes.view(torch::kInt8).to(torch::kFloat);
  } else {
    auto b = codes.to(torch::kInt16);
    q = torch::stack({b.bitwise_and(15), b.bitwise_right_shift(4)}, 1).reshape({-1}).sub_(8).to(torch::kFloat);
  }
  auto values = q.view({n / block, block}).mul_(scale.unsqueeze(1)).view({-1});
  if (add) out.add_(values);
  else out.copy_(values);
}

}  // namespace detail

}  // namespace ht::comm
