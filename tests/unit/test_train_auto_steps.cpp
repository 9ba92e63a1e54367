// local_sgd.steps = auto: the choice from measured figures (checked against numbers worked by hand)
// and the measurement, which must leave the model, its gradients and the RNG streams untouched.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/communicator.h"
#include "config/config.h"
#include "core/error.h"
#include "model/gpt.h"
#include "train/auto_local_steps.h"

using ht::train::choose_local_steps;
using ht::train::StepAndLink;

namespace {

std::vector<int64_t> candidates_of(const ht::train::LocalStepsChoice& c) {
  std::vector<int64_t> out;
  for (const auto& k : c.candidates) out.push_back(k.steps);
  return out;
}

// Compute 1 s per step, one fp32 exchange 1 s (250k values = 1 MB at 1 MB/s, no latency).
StepAndLink one_second_each() {
  StepAndLink m;
  m.compute_s = 1.0;
  m.bytes_per_s = 1e6;
  m.exchange_values = 250000;
  return m;
}

}  // namespace

// cost(N) = (1 + 1/N) x (1 + 0.045 log2 N) with the default penalty: 2, 1.568, 1.363, 1.277, 1.254, 1.263,
// 1.290 for N = 1..64.
TEST(AutoLocalSteps, ChoosesTheLeastPredictedTimeToTheSameLoss) {
  ht::config::LocalSgdConfig l;
  const auto c = choose_local_steps(l, one_second_each(), 0);
  EXPECT_EQ(c.steps, 16);
  ASSERT_EQ(candidates_of(c), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_DOUBLE_EQ(c.candidates[0].cost, 2.0);
  EXPECT_DOUBLE_EQ(c.candidates[3].step_s, 1.125);
  EXPECT_DOUBLE_EQ(c.candidates[3].relative_steps, 1.135);
  EXPECT_DOUBLE_EQ(c.candidates[4].cost, 1.0625 * 1.18);
  EXPECT_DOUBLE_EQ(c.candidates[5].cost, 1.03125 * 1.225);
}

TEST(AutoLocalSteps, TheLinkAndThePenaltyMoveTheChoice) {
  ht::config::LocalSgdConfig l;
  StepAndLink free_link = one_second_each();
  free_link.bytes_per_s = 0;  // one rank: nothing to exchange, every doubling only costs steps
  EXPECT_EQ(choose_local_steps(l, free_link, 0).steps, 1);
  StepAndLink slow = one_second_each();
  slow.bytes_per_s = 1e4;  // an exchange takes 100 steps' compute
  EXPECT_EQ(choose_local_steps(l, slow, 0).steps, 64);
  l.auto_step_penalty = 0.0;  // steps do not grow with N: the longest cycle is never worse
  EXPECT_EQ(choose_local_steps(l, one_second_each(), 0).steps, 64);
  l.auto_step_penalty = 0.5;  // steeply growing steps: N = 2 costs 1.5 x 1.5 = 2.25 > N = 1's 2
  EXPECT_EQ(choose_local_steps(l, one_second_each(), 0).steps, 1);
}

// Fragments and overlap: only cycles that pass config::local_steps_problem are offered; an exchange
// overlapped with a step that is at least as long costs nothing.
TEST(AutoLocalSteps, OffersOnlyCyclesThatFitFragmentsAndOverlap) {
  ht::config::LocalSgdConfig l;
  l.fragments = 4;
  l.overlap_steps = 1;
  auto c = choose_local_steps(l, one_second_each(), 0);
  EXPECT_EQ(candidates_of(c), (std::vector<int64_t>{8, 16, 32, 64}));  // N / 4 > 1 and 4 | N
  EXPECT_EQ(c.steps, 8);  // a 0.25 s fragment hides under one 1 s step: the shortest cycle wins
  EXPECT_DOUBLE_EQ(c.candidates[0].step_s, 1.0);
  l.fragments = 1;
  // 1 s hides under 1 step from N = 2 on; N = 1, the per-step all-reduce, is offered (overlap_steps is
  // local SGD's) but charged blocking: 2 s per step against N = 2's 1 s x 1.045.
  c = choose_local_steps(l, one_second_each(), 0);
  EXPECT_EQ(candidates_of(c), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_DOUBLE_EQ(c.candidates[0].cost, 2.0);
  EXPECT_EQ(c.steps, 2);
  StepAndLink fast = one_second_each();
  fast.bytes_per_s = 1e8;  // a 10 ms exchange: the per-step mode's 1.01 s beats N = 2's 1.045
  EXPECT_EQ(choose_local_steps(l, fast, 0).steps, 1);
  l.overlap_steps = 0;
  // At least 4 exchanges in the run: 40 steps allow N <= 10.
  EXPECT_EQ(candidates_of(choose_local_steps(l, one_second_each(), 40)), (std::vector<int64_t>{1, 2, 4, 8}));
}

// comm_dtype = auto: each dtype is charged its wire bytes (codes and fp32 scales, one per 64 values);
// on a slow link int4 wins, on a fast one the gain is below the margin and fp32 stays.
TEST(AutoLocalSteps, DtypeAutoChargesWireBytesAndKeepsPrecisionOnNearTies) {
  ht::config::LocalSgdConfig l;
  l.comm_dtype = ht::config::ExchangeDtype::kAuto;
  StepAndLink slow = one_second_each();
  slow.bytes_per_s = 1e4;  // fp32 exchange 100 s
  auto c = choose_local_steps(l, slow, 0);
  EXPECT_EQ(c.dtype, ht::config::ExchangeDtype::kInt4);
  EXPECT_EQ(c.steps, 64);
  // fp32 and bf16 x N = 1..64, int8 and int4 x N = 2..64 (N = 1 is the per-step mode: gradients unquantized)
  ASSERT_EQ(c.candidates.size(), 2u * 7u + 2u * 6u);
  EXPECT_DOUBLE_EQ(c.candidates[0].exchange_bytes, 1e6);                  // fp32
  EXPECT_DOUBLE_EQ(c.candidates[7].exchange_bytes, 5e5);                  // bf16
  // Quantized: 250000 values padded to 3907 blocks of 64 (250048), one 4-byte scale per block.
  EXPECT_EQ(c.candidates[14].steps, 2);
  EXPECT_DOUBLE_EQ(c.candidates[14].exchange_bytes, 250048.0 + 3907 * 4);  // int8: a byte per value
  EXPECT_DOUBLE_EQ(c.candidates[20].exchange_bytes, 125024.0 + 3907 * 4);  // int4: two values a byte
  // int4 at N = 64, no overlap: the whole exchange (140652 bytes at 1e4 B/s) spread over 64 steps.
  EXPECT_DOUBLE_EQ(c.candidates[25].step_s, 1.0 + 140652.0 / 1e4 / 64);
  StepAndLink fast = one_second_each();
  fast.bytes_per_s = 1e9;  // fp32 exchange 1 ms: bf16 would save 0.05 % per step
  c = choose_local_steps(l, fast, 0);
  EXPECT_EQ(c.dtype, ht::config::ExchangeDtype::kFp32);
  EXPECT_EQ(c.steps, 1);
  // Averaged optimizer moments (optimizer_state = average) go in fp32 beside quantized tensors, in the
  // exchange dtype otherwise; the per-step mode (N = 1) exchanges gradients only.
  StepAndLink with_moments = slow;
  with_moments.moment_values = 1000;
  c = choose_local_steps(l, with_moments, 0);
  EXPECT_DOUBLE_EQ(c.candidates[0].exchange_bytes, 1e6);                          // fp32, N = 1
  EXPECT_DOUBLE_EQ(c.candidates[1].exchange_bytes, 1e6 + 4000);                   // fp32, N = 2
  EXPECT_DOUBLE_EQ(c.candidates[7].exchange_bytes, 5e5);                          // bf16, N = 1
  EXPECT_DOUBLE_EQ(c.candidates[8].exchange_bytes, 5e5 + 2000);                   // bf16, N = 2
  EXPECT_DOUBLE_EQ(c.candidates[14].exchange_bytes, 250048.0 + 3907 * 4 + 4000);  // int8 + fp32 moments
  l.quant_block = 63;  // int4 packs two values per byte: an odd block leaves it out
  c = choose_local_steps(l, slow, 0);
  EXPECT_EQ(c.dtype, ht::config::ExchangeDtype::kInt8);
  EXPECT_EQ(c.candidates.size(), 2u * 7u + 6u);
}

// An encoded exchange goes by its own collectives (alltoall of the chunks, allgather of the mean):
// where those were timed, an encoded dtype is charged their latency and rate, and fp32 moments beside
// a quantized exchange the all-reduce's. Candidates: fp32, bf16 x N = 1..64 (7 each), int8, int4 x
// N = 2..64 (6 each).
TEST(AutoLocalSteps, EncodedExchangesAreChargedTheirOwnTimedLatencyAndRate) {
  ht::config::LocalSgdConfig l;
  l.comm_dtype = ht::config::ExchangeDtype::kAuto;
  StepAndLink m = one_second_each();
  m.bytes_per_s = 1e4;
  m.latency_s = 0.5;
  using D = ht::config::ExchangeDtype;
  for (const auto d : {D::kBf16, D::kInt8, D::kInt4}) m.encoded[d] = {2.0, 5e3};
  auto c = choose_local_steps(l, m, 0);
  EXPECT_DOUBLE_EQ(c.candidates[6].step_s, 1.0 + (0.5 + 1e6 / 1e4) / 64);         // fp32, N = 64
  EXPECT_DOUBLE_EQ(c.candidates[25].step_s, 1.0 + (2.0 + 140652.0 / 5e3) / 64);   // int4, N = 64
  EXPECT_EQ(c.dtype, ht::config::ExchangeDtype::kInt4);
  m.moment_values = 1000;
  c = choose_local_steps(l, m, 0);
  EXPECT_DOUBLE_EQ(c.candidates[19].step_s,  // int8 codes encoded, 4000 bytes of fp32 moments all-reduced
                   1.0 + (0.5 + 4000.0 / 1e4 + 2.0 + (250048.0 + 3907 * 4) / 5e3) / 64);
  EXPECT_DOUBLE_EQ(c.candidates[13].step_s, 1.0 + (2.0 + (5e5 + 2000) / 5e3) / 64);  // bf16: moments in bf16
  // An encoded exchange 8x slower per byte than the all-reduce outweighs int4's 7x fewer bytes: fp32
  // stays; charged the all-reduce's figures (not timed), int4 would have been chosen.
  m.moment_values = 0;
  for (auto& [dtype, fit] : m.encoded) fit.bytes_per_s = 1e4 / 8;
  EXPECT_EQ(choose_local_steps(l, m, 0).dtype, ht::config::ExchangeDtype::kFp32);
  m.encoded.clear();
  c = choose_local_steps(l, m, 0);
  EXPECT_EQ(c.dtype, ht::config::ExchangeDtype::kInt4);
  EXPECT_DOUBLE_EQ(c.candidates[25].step_s, 1.0 + (0.5 + 140652.0 / 1e4) / 64);
}

// Each encoded dtype is charged its own timed rate: where encoding is the cost (a fast link), int8 and
// int4 move their wire bytes far slower than bf16 does (as measured on shared memory), and bf16 wins;
// charged int4's rate as well, bf16 would lose to fp32. fp32 exchange 100 s, compute 1 s.
TEST(AutoLocalSteps, EachEncodedDtypeIsChargedItsOwnRate) {
  using D = ht::config::ExchangeDtype;
  ht::config::LocalSgdConfig l;
  l.comm_dtype = D::kAuto;
  StepAndLink m = one_second_each();
  m.bytes_per_s = 1e4;
  m.encoded[D::kBf16] = {0.0, 1e4};      // bf16: 5e5 bytes in 50 s
  m.encoded[D::kInt8] = {0.0, 1e4 / 8};  // int8: 265676 bytes in 212.5 s
  m.encoded[D::kInt4] = {0.0, 1e4 / 16}; // int4: 140652 bytes in 225.0 s
  auto c = choose_local_steps(l, m, 0);
  EXPECT_EQ(c.dtype, D::kBf16);
  EXPECT_EQ(c.steps, 64);
  EXPECT_DOUBLE_EQ(c.candidates[13].step_s, 1.0 + 5e5 / 1e4 / 64);                      // bf16, N = 64
  EXPECT_DOUBLE_EQ(c.candidates[19].step_s, 1.0 + (250048.0 + 3907 * 4) / 1250.0 / 64);  // int8, N = 64
  EXPECT_DOUBLE_EQ(c.candidates[25].step_s, 1.0 + 140652.0 / 625.0 / 64);               // int4, N = 64
  m.encoded[D::kBf16] = m.encoded[D::kInt4];  // bf16 at int4's rate: 800 s per exchange
  EXPECT_EQ(choose_local_steps(l, m, 0).dtype, D::kFp32);
}

// fragments = auto with one step of overlap, exchange 4 s, compute 1 s, the default penalty: F = 1 is
// best at N = 64 ((1 + 3/64) x 1.27 = 1.3295), F = 2 at N = 32 ((1 + 2/32) x 1.225 = 1.3016, 2.1 % cheaper:
// taken), F = 4 hides each 1 s fragment under a step, N = 8 (N / F > 1) costs 1.135: taken.
TEST(AutoLocalSteps, FragmentsAutoPaysWhenEachFragmentHidesUnderTheOverlap) {
  ht::config::LocalSgdConfig l;
  l.fragments = ht::config::LocalSgdConfig::kAutoFragments;
  l.overlap_steps = 1;
  StepAndLink m = one_second_each();
  m.bytes_per_s = 2.5e5;
  auto c = choose_local_steps(l, m, 0, /*max_fragments=*/4);
  EXPECT_EQ(c.fragments, 4);
  EXPECT_EQ(c.steps, 8);
  std::vector<int64_t> fragments;
  for (const auto& k : c.candidates)
    if (fragments.empty() || fragments.back() != k.fragments) fragments.push_back(k.fragments);
  EXPECT_EQ(fragments, (std::vector<int64_t>{1, 2, 4}));
  // Only two blocks: F <= 2, and F = 2 takes over from F = 1 (2.1 % > the 2 % margin).
  c = choose_local_steps(l, m, 0, /*max_fragments=*/2);
  EXPECT_EQ(c.fragments, 2);
  EXPECT_EQ(c.steps, 32);
  // Without overlap more fragments only add latency: F = 1.
  l.overlap_steps = 0;
  m.latency_s = 0.01;
  EXPECT_EQ(choose_local_steps(l, m, 0, 4).fragments, 1);
}

TEST(AutoLocalSteps, NoFittingCycleNamesTheKey) {
  ht::config::LocalSgdConfig l;
  l.fragments = 4;
  l.overlap_steps = 16;  // needs N / 4 > 16: N = 128, beyond the candidates
  try {
    choose_local_steps(l, one_second_each(), 0);
    ADD_FAILURE() << "no error";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("local_sgd.steps"), std::string::npos) << e.what();
  }
}

// The probe runs real forward/backward passes: afterwards the parameters are bitwise the same, no
// gradient is left, and the next random draw is the one it would have been.
TEST(AutoLocalSteps, MeasuringLeavesTheModelAndTheRngAsTheyWere) {
  ht::config::Config cfg;
  cfg.model.n_layer = 2;
  cfg.model.n_head = 2;
  cfg.model.d_model = 16;
  cfg.model.seq_len = 8;
  cfg.model.vocab_size = 50;
  cfg.model.dropout = 0.1;  // dropout draws from the default generator
  cfg.train.micro_batch_size = 2;
  cfg.train.grad_accum_steps = 2;
  cfg.local_sgd.enabled = true;
  torch::manual_seed(3);
  ht::model::Gpt gpt(ht::model::GptOptions::from_config(cfg.model));
  std::vector<torch::Tensor> before;
  for (const auto& p : gpt->parameters()) before.push_back(p.detach().clone());
  torch::manual_seed(11);
  const auto expected_draw = torch::rand({4});
  torch::manual_seed(11);
  auto comm = ht::comm::make_local();
  const StepAndLink m = ht::train::measure_step_and_link(gpt, *comm, cfg, torch::kCPU);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected_draw));
  EXPECT_GT(m.compute_s, 0.0);
  EXPECT_EQ(m.bytes_per_s, 0.0);  // one rank: no link to time
  int64_t values = 0;
  const auto params = gpt->parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    const auto& p = params[i];
    EXPECT_TRUE(torch::equal(p, before[i]));
    EXPECT_FALSE(p.grad().defined());
    values += p.numel();
  }
  // The parameters (the model has no floating-point buffers).
  EXPECT_EQ(m.exchange_values, values);
}
