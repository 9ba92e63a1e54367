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

namespace {

// The integer encoding as libtorch operations (what a device buffer runs): the host loops must
// write the same bytes and decode to the same floats.
torch::Tensor encoded_by_tensor_ops(const torch::Tensor& x, ExchangeDType t, int64_t block) {
  const double cmax = t == ExchangeDType::kI8 ? 127 : 7;
  auto rows = x.reshape({-1, block});
  auto scale = rows.abs().amax(1).div_(cmax);
  auto inv = torch::where(scale > 0, scale.reciprocal(), torch::zeros_like(scale));
  auto q = rows.mul(inv.unsqueeze(1)).round_().clamp_(-cmax, cmax).to(torch::kInt16).reshape({-1});
  torch::Tensor codes;
  if (t == ExchangeDType::kI8) {
    codes = q.to(torch::kInt8).view(torch::kUInt8);
  } else {
    auto pairs = q.view({-1, 2}).add_(8);
    codes = pairs.select(1, 0).add(pairs.select(1, 1), 16).to(torch::kUInt8);
  }
  return torch::cat({codes, scale.contiguous().view(torch::kUInt8)});
}

}  // namespace

TEST(CommExchange, HostCodecMatchesTheTensorFormulationByteForByte) {
  torch::manual_seed(9);
  for (auto t : {ExchangeDType::kI8, ExchangeDType::kI4})
    for (int64_t block : {16, 64, 128}) {
      auto x = torch::randn({block * 40}) * torch::logspace(-8, 3, 40).repeat_interleave(block);
      x.narrow(0, 3 * block, block).zero_();  // an all-zero block
      // Ties: with max|x| = code_max the scale is 1, so x.5 must round half to even on both sides.
      const float cmax = t == ExchangeDType::kI8 ? 127.0f : 7.0f;
      x.narrow(0, 5 * block, block).copy_(
          torch::tensor({cmax, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f}).repeat({block / 8}));
      const auto expected = encoded_by_tensor_ops(x, t, block);
      auto wire = torch::empty({static_cast<int64_t>(ht::comm::wire_bytes(t, x.numel(), block))}, torch::kUInt8);
      ht::comm::encode(x, t, block, wire);
      const std::string what = ht::comm::to_string(t) + " block " + std::to_string(block);
      ASSERT_TRUE(torch::equal(wire, expected)) << what << ": "
                                                << wire.ne(expected).sum().item<int64_t>() << " bytes differ";
      // Decoding: code x scale in fp32, written or added.
      const int64_t cb = t == ExchangeDType::kI8 ? x.numel() : x.numel() / 2;
      auto scale = expected.narrow(0, cb, x.numel() / block * 4).clone().view(torch::kFloat);
      torch::Tensor q;
      if (t == ExchangeDType::kI8) {
        q = expected.narrow(0, 0, cb).view(torch::kInt8).to(torch::kFloat);
      } else {
        auto b = expected.narrow(0, 0, cb).to(torch::kInt16);
        q = torch::stack({b.bitwise_and(15), b.bitwise_right_shift(4)}, 1).reshape({-1}).sub_(8).to(torch::kFloat);
      }
      const auto values = q.view({-1, block}).mul_(scale.unsqueeze(1)).view({-1});
      auto out = torch::empty_like(x);
      ht::comm::decode(wire, t, block, out);
      EXPECT_TRUE(torch::equal(out, values)) << what;
      auto acc = torch::randn_like(x);
      const auto sum = acc + values;
      ht::comm::decode(wire, t, block, acc, /*add=*/true);
      EXPECT_TRUE(torch::equal(acc, sum)) << what << " (add)";
    }
}
