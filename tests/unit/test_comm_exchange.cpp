// Wire encodings of averaged values (comm/exchange.h): exact byte counts, the quantization error
// bound (|decoded - x| <= scale / 2 with scale = max|x of its block| / 127 or / 7), exact zeros,
// int4 packing order, and the 16-bit types as one rounding.
#include <gtest/gtest.h>

#include "comm/exchange.h"
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
