// model.attention = auto at start-up: the rule for a fresh run, the checkpoint's kernel on resume.
#include <gtest/gtest.h>

#include "train/attention_choice.h"

using ht::config::AttentionKernel;

namespace {
ht::config::Config bf16_config(AttentionKernel kernel) {
  ht::config::Config c;
  c.train.autocast = ht::config::Autocast::kBf16;
  c.model.seq_len = 128;
  c.model.attention = kernel;
  return c;
}

ht::checkpoint::Snapshot storing(const ht::config::Config& run) {
  ht::checkpoint::Snapshot s;
  s.strings["config"] = ht::config::to_toml(run);
  s.path = "ckpt-00000004.h5";
  return s;
}
}  // namespace

TEST(AttentionChoice, AnExplicitKernelIsKept) {
  auto c = bf16_config(AttentionKernel::kSdpa);
  EXPECT_EQ(ht::train::resolve_attention(c, torch::kCPU, std::nullopt), "");
  EXPECT_EQ(c.model.attention, AttentionKernel::kSdpa);
}

TEST(AttentionChoice, AFreshRunFollowsTheRule) {
  auto c = bf16_config(AttentionKernel::kAuto);
  EXPECT_NE(ht::train::resolve_attention(c, torch::kCPU, std::nullopt).find("eager"), std::string::npos);
  EXPECT_EQ(c.model.attention, AttentionKernel::kEager);
  auto fp32 = bf16_config(AttentionKernel::kAuto);
  fp32.train.autocast = ht::config::Autocast::kNone;
  ht::train::resolve_attention(fp32, torch::kCPU, std::nullopt);
  EXPECT_EQ(fp32.model.attention, AttentionKernel::kSdpa);
}

// The rule would say eager now; the checkpoint's run trained with SDPA, so the resumed run must too.
TEST(AttentionChoice, AResumedRunKeepsItsCheckpointsKernel) {
  auto c = bf16_config(AttentionKernel::kAuto);
  const std::string said = ht::train::resolve_attention(c, torch::kCPU, storing(bf16_config(AttentionKernel::kSdpa)));
  EXPECT_EQ(c.model.attention, AttentionKernel::kSdpa);
  EXPECT_NE(said.find("ckpt-00000004.h5"), std::string::npos) << said;
  auto e = bf16_config(AttentionKernel::kAuto);
  e.train.autocast = ht::config::Autocast::kNone;  // the rule would say sdpa
  ht::train::resolve_attention(e, torch::kCPU, storing(bf16_config(AttentionKernel::kEager)));
  EXPECT_EQ(e.model.attention, AttentionKernel::kEager);
}

// A checkpoint from before the key stores auto: every run then used SDPA.
TEST(AttentionChoice, ACheckpointFromBeforeTheKeyMeansSdpa) {
  auto c = bf16_config(AttentionKernel::kAuto);
  ht::train::resolve_attention(c, torch::kCPU, storing(bf16_config(AttentionKernel::kAuto)));
  EXPECT_EQ(c.model.attention, AttentionKernel::kSdpa);
  auto none = bf16_config(AttentionKernel::kAuto);
  ht::checkpoint::Snapshot no_config;  // no stored config at all: the rule
  ht::train::resolve_attention(none, torch::kCPU, no_config);
  EXPECT_EQ(none.model.attention, AttentionKernel::kEager);
}
