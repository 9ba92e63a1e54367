// Wire encodings of averaged values (comm/exchange.h): exact byte counts, the quantization error
// bound (|decoded - x| <= scale / 2 with scale = max|x of its block| / 127 or / 7), exact zeros,
// int4 packing order, the 16-bit types as one rounding, and the fused CPU codec writing the bytes of
// the device-generic ATen chain.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "comm/exchange.h"
#include "comm/quantize_cpu.h"
#include "core/error.h"

namespace {

using ht::comm::ExchangeDType;

torch::Tensor round_trip(const torch::Tensor& x, ExchangeDType t, int64_t block) {
  auto wire = torch::empty({static_cast<int64_t>(ht::comm::wire_bytes(t, x.numel(), block))}, torch::kUInt8);
  ht::comm::encode(x, t, block, wire);
  auto out = torch::empty_like(x);
  ht::comm::decode(wire, t, block, out);
  return out;
}

}  // namespace

TEST(CommExchange, WireBytesAreCodesPlusOneFloatPerBlock) {
  EXPECT_EQ(ht::comm::wire_bytes(ExchangeDType::kF32, 1000, 64), 4000u);
  EXPECT_EQ(ht::comm::wire_bytes(ExchangeDType::kBF16, 1000, 64), 2000u);
  EXPECT_EQ(ht::comm::wire_bytes(ExchangeDType::kI8, 1024, 64), 1024u + 16u * 4u);
  EXPECT_EQ(ht::comm::wire_bytes(ExchangeDType::kI4, 1024, 64), 512u + 16u * 4u);
  EXPECT_EQ(ht::comm::wire_bytes(ExchangeDType::kI4, 1024, 128), 512u + 8u * 4u);
  EXPECT_EQ(ht::comm::elems_multiple(ExchangeDType::kI8, 64), 64);
  EXPECT_EQ(ht::comm::elems_multiple(ExchangeDType::kBF16, 64), 1);
}

TEST(CommExchange, QuantizationErrorWithinHalfAScalePerBlock) {
  torch::manual_seed(5);
  for (auto [t, levels] : {std::pair{ExchangeDType::kI8, 127.0}, std::pair{ExchangeDType::kI4, 7.0}})
    for (int64_t block : {16, 64, 128}) {
      // Blocks of very different magnitudes: each has its own scale.
      auto x = torch::randn({block * 32}) * torch::logspace(-6, 2, 32).repeat_interleave(block);
      const auto y = round_trip(x, t, block);
      const auto scale = x.view({-1, block}).abs().amax(1, true) / levels;
      const auto err = (y - x).view({-1, block}).abs();
      EXPECT_TRUE((err <= scale / 2 * (1 + 1e-6) + 1e-30).all().item<bool>())
          << ht::comm::to_string(t) << " block " << block << ": worst error / scale "
          << (err / scale).max().item<double>();
      // The block's largest value is encoded exactly up to fp32 rounding of scale x code.
      EXPECT_TRUE(torch::allclose(y.view({-1, block}).abs().amax(1), x.view({-1, block}).abs().amax(1), 1e-6, 0));
    }
}

TEST(CommExchange, ZerosStayExactAndInt4PacksEvenValuesLow) {
  auto zeros = torch::zeros({128});
  EXPECT_TRUE(torch::equal(round_trip(zeros, ExchangeDType::kI4, 64), zeros));
  EXPECT_TRUE(torch::equal(round_trip(zeros, ExchangeDType::kI8, 64), zeros));
  auto x = torch::tensor({7.0f, -7.0f, 1.0f, 0.0f});
  auto wire = torch::empty({static_cast<int64_t>(ht::comm::wire_bytes(ExchangeDType::kI4, 4, 4))}, torch::kUInt8);
  ht::comm::encode(x, ExchangeDType::kI4, 4, wire);
  EXPECT_EQ(wire[0].item<int>(), (7 + 8) + 16 * (-7 + 8));  // value 0 in the low nibble
  EXPECT_EQ(wire[1].item<int>(), (1 + 8) + 16 * (0 + 8));
  EXPECT_TRUE(torch::equal(round_trip(x, ExchangeDType::kI4, 4), x));  // scale 1: exact
}

TEST(CommExchange, SixteenBitIsOneRoundingAndDecodeAdds) {
  auto x = torch::randn({300});
  EXPECT_TRUE(torch::equal(round_trip(x, ExchangeDType::kBF16, 64), x.to(torch::kBFloat16).to(torch::kFloat)));
  auto wire = torch::empty({1200}, torch::kUInt8);
  ht::comm::encode(x, ExchangeDType::kF32, 64, wire);
  auto acc = torch::ones({300});
  ht::comm::decode(wire, ExchangeDType::kF32, 64, acc, /*add=*/true);
  EXPECT_TRUE(torch::equal(acc, x + 1));
}

TEST(CommExchange, WrongBufferSizesAreRefused) {
  auto x = torch::randn({100});
  auto small = torch::empty({10}, torch::kUInt8);
  EXPECT_THROW(ht::comm::encode(x, ExchangeDType::kI8, 64, small), ht::Error);  // 100 is not a multiple of 64
  auto wire = torch::empty({static_cast<int64_t>(ht::comm::wire_bytes(ExchangeDType::kI8, 128, 64))}, torch::kUInt8);
  EXPECT_THROW(ht::comm::encode(torch::randn({64}), ExchangeDType::kI8, 64, wire), ht::Error);
}

// CPU buffers take the fused codec (comm/quantize_cpu.h: AVX2 where the CPU has it, plain loops
// otherwise), other devices the ATen chain: the same bytes from each, and the same values back
// (plain and added), for both integer types and several blocks (2 is below the 8-value vector),
// on magnitudes from 1e-8 to 1e3, an all-zero block, a block of exact ties (scale 1, values k + 0.5:
// rounded half to even as ATen rounds, not away from zero) and one all at its clamp. A NaN makes
// its block's scale NaN, so the whole block decodes as NaN (its code bytes are not compared: ATen
// converts a NaN to an integer as the CPU happens to).
TEST(CommExchange, FusedCpuCodecWritesTheBytesOfTheGenericOne) {
  std::vector<bool> paths{false};
  if (ht::comm::has_vector_quantize()) paths.push_back(true);
  torch::manual_seed(11);
  for (auto t : {ExchangeDType::kI8, ExchangeDType::kI4})
    for (int64_t block : {2, 16, 64, 128})
      for (const bool vector : paths) {
        const std::string where = ht::comm::to_string(t) + " block " + std::to_string(block) +
                                  (vector ? " vector" : " plain");
        const bool int4 = t == ExchangeDType::kI4;
        const int64_t n = block * 40;
        auto x = torch::randn({n}) * torch::logspace(-8, 3, 40).repeat_interleave(block);
        x.narrow(0, 0, block).zero_();
        const double levels = int4 ? 7.0 : 127.0;
        x.narrow(0, block, block).copy_(torch::arange(block).remainder(6).sub(2.5));  // -2.5 .. 2.5
        x[block] = levels;                                                             // scale exactly 1
        x.narrow(0, 3 * block, block).fill_(-2.5f);
        const auto bytes = static_cast<int64_t>(ht::comm::wire_bytes(t, n, block));
        const int64_t code_bytes = int4 ? n / 2 : n;
        auto fused = torch::empty({bytes}, torch::kUInt8), generic = torch::empty({bytes}, torch::kUInt8);
        auto* w = fused.data_ptr<uint8_t>();
        ht::comm::quantize_blocks(x.data_ptr<float>(), n, block, int4, w, w + code_bytes, vector);
        ht::comm::detail::encode_generic(x, t, block, generic);
        EXPECT_TRUE(torch::equal(fused, generic)) << where;
        for (bool add : {false, true}) {
          auto a = torch::linspace(-1, 1, n), b = a.clone();
          ht::comm::dequantize_blocks(w, w + code_bytes, n, block, int4, a.data_ptr<float>(), add, vector);
          ht::comm::detail::decode_generic(fused, t, block, b, add);
          EXPECT_TRUE(torch::equal(a, b)) << where << " add " << add;
        }
        x[5 * block + 1] = std::numeric_limits<float>::quiet_NaN();
        ht::comm::quantize_blocks(x.data_ptr<float>(), n, block, int4, w, w + code_bytes, vector);
        auto y = torch::zeros({n});
        ht::comm::dequantize_blocks(w, w + code_bytes, n, block, int4, y.data_ptr<float>(), false, vector);
        EXPECT_TRUE(y.narrow(0, 5 * block, block).isnan().all().item<bool>()) << where;
        EXPECT_EQ(y.isnan().sum().item<int64_t>(), block) << where;
      }
  // The public calls take the fused path for fp32 CPU buffers: the bytes of the generic chain.
  auto x = torch::randn({4096});
  for (auto t : {ExchangeDType::kI8, ExchangeDType::kI4}) {
    const auto bytes = static_cast<int64_t>(ht::comm::wire_bytes(t, 4096, 64));
    auto a = torch::empty({bytes}, torch::kUInt8), b = torch::empty({bytes}, torch::kUInt8);
    ht::comm::encode(x, t, 64, a);
    ht::comm::detail::encode_generic(x, t, 64, b);
    EXPECT_TRUE(torch::equal(a, b)) << ht::comm::to_string(t);
  }
}
