// Config parsing and validation: every bad value is rejected with the key named.
#include <gtest/gtest.h>

#include <fstream>

#include "config/config.h"
#include "core/error.h"
#include "support/temp_dir.h"

using ht::config::Config;

namespace {
std::string error_of(const std::vector<std::string>& overrides, const std::string& file = "") {
  try {
    ht::config::load(file, overrides);
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kUsage);
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, DefaultsAreValid) { EXPECT_NO_THROW(ht::config::load("", {})); }

TEST(Config, OverridesApply) {
  auto c = ht::config::load("", {"model.n_layer=6", "train.lr=0.001", "local_sgd.enabled=true", "train.device=cpu"});
  EXPECT_EQ(c.model.n_layer, 6);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.001);
  EXPECT_TRUE(c.local_sgd.enabled);
  EXPECT_EQ(c.train.device, ht::config::Device::kCpu);
}

TEST(Config, EnumValuesAreParsedOnce) {
  auto c = ht::config::load("", {"local_sgd.comm_dtype=bf16", "local_sgd.outer=diloco", "recompute.policy=every_k",
                                 "model.task=classification", "log.level=debug"});
  EXPECT_EQ(c.local_sgd.comm_dtype, ht::config::ExchangeDtype::kBf16);
  EXPECT_EQ(c.local_sgd.outer, ht::config::OuterOptimizer::kDiloco);
  EXPECT_EQ(c.recompute.policy, ht::config::RecomputePolicy::kEveryK);
  EXPECT_EQ(c.model.task, ht::config::Task::kClassification);
  EXPECT_EQ(c.log.level, ht::log::Level::kDebug);
  EXPECT_EQ(ht::config::choices<ht::config::ExchangeDtype>(), "fp32 | bf16 | fp16 | int8 | int4 | auto");
}

TEST(Config, RejectsEachBadValueNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model.n_head=3", "model.n_head"},            // does not divide d_model = 128
      {"model.seq_len=0", "model.seq_len"},
      {"train.micro_batch_size=0", "train.micro_batch_size"},
      {"train.grad_accum_steps=0", "train.grad_accum_steps"},
      {"model.dropout=1.5", "model.dropout"},
      {"train.lr=-1", "train.lr"},
      {"recompute.policy=sometimes", "recompute.policy"},
      {"local_sgd.steps=0", "local_sgd.steps"},
      {"checkpoint.keep=1", "checkpoint.keep"},
      {"eval.strategy=weekly", "eval.strategy"},
      {"local_sgd.comm_dtype=fp8", "local_sgd.comm_dtype"},
      {"model.n_layer=abc", "model.n_layer"},
      {"model.no_such_key=1", "model.no_such_key"},
  };
  for (const auto& [override_, key] : cases) {
    const auto msg = error_of({override_});
    EXPECT_NE(msg.find(key), std::string::npos) << override_ << " -> '" << msg << "'";
  }
  auto msg = error_of({"model.max_seq_len=64", "model.seq_len=128"});
  EXPECT_NE(msg.find("model.seq_len"), std::string::npos) << msg;
  msg = error_of({"recompute.policy=every_k", "recompute.k=9", "model.n_layer=4"});
  EXPECT_NE(msg.find("recompute.k"), std::string::npos) << msg;
  msg = error_of({"local_sgd.enabled=true", "train.max_steps=10", "local_sgd.warmup_steps=10"});
  EXPECT_NE(msg.find("local_sgd.warmup_steps"), std::string::npos) << msg;
}

// log.metrics_file is a name inside train.output_dir: a path would write outside the run directory.
TEST(Config, MetricsFileIsANameInsideTheOutputDir) {
  for (const std::string bad : {"../escaped.jsonl", "/tmp/m.jsonl", "logs/m.jsonl", "..", ".", ""}) {
    const auto msg = error_of({"log.metrics_file=" + bad});
    EXPECT_NE(msg.find("config key 'log.metrics_file'"), std::string::npos) << bad << " -> '" << msg << "'";
  }
  EXPECT_NO_THROW(ht::config::load("", {"log.metrics_file=metrics-run2.jsonl"}));
}

TEST(Config, FileErrorsNameKeyAndType) {
  const std::string path = ht::test::make_temp_dir("ht_config_test_") + "/bad.toml";
  std::ofstream(path) << "[model]\nn_layer = \"four\"\n";
  EXPECT_NE(error_of({}, path).find("model.n_layer"), std::string::npos);
  std::ofstream(path) << "[modle]\nn_layer = 4\n";
  EXPECT_NE(error_of({}, path).find("modle.n_layer"), std::string::npos);
  std::ofstream(path) << "[model\nn_layer = 4\n";
  EXPECT_NE(error_of({}, path).find(path), std::string::npos);
}

TEST(Config, DumpRoundTrips) {
  auto c = ht::config::load("", {"model.n_layer=6", "data.path=/tmp/x y.h5", "train.lr=0.00025"});
  const std::string path = ht::test::make_temp_dir("ht_config_test_") + "/dump.toml";
  std::ofstream(path) << ht::config::to_toml(c);
  auto d = ht::config::load(path, {});
  EXPECT_EQ(ht::config::to_toml(d), ht::config::to_toml(c));
  EXPECT_EQ(d.data.paths, std::vector<std::string>{"/tmp/x y.h5"});
}

// local_sgd.steps takes a count or "auto" (kAutoSteps), from TOML and from --set, and prints back as
// "auto": the resolved config a run writes reads back the same.
TEST(Config, LocalStepsAutoParsesAndRoundTrips) {
  const auto c = ht::config::load("", {"local_sgd.enabled=true", "local_sgd.steps=auto"});
  EXPECT_EQ(c.local_sgd.steps, ht::config::LocalSgdConfig::kAutoSteps);
  const std::string text = ht::config::to_toml(c);
  EXPECT_NE(text.find("steps = \"auto\""), std::string::npos) << text;
  EXPECT_EQ(ht::config::load_text(text, "round trip", {}).local_sgd.steps, ht::config::LocalSgdConfig::kAutoSteps);
  EXPECT_EQ(ht::config::load_text("[local_sgd]\nsteps = \"auto\"\n", "toml", {}).local_sgd.steps,
            ht::config::LocalSgdConfig::kAutoSteps);
  EXPECT_EQ(ht::config::load_text("[local_sgd]\nsteps = 16\n", "toml", {}).local_sgd.steps, 16);
}

TEST(Config, LocalStepsRejectsWhatIsNeitherACountNorAuto) {
  for (const std::string bad : {"local_sgd.steps=0", "local_sgd.steps=-8", "local_sgd.steps=automatic",
                                "local_sgd.steps=8.5"}) {
    const std::string msg = error_of({bad});
    EXPECT_NE(msg.find("local_sgd.steps"), std::string::npos) << bad << ": " << msg;
  }
  try {
    ht::config::load_text("[local_sgd]\nsteps = 0\n", "toml", {});
    ADD_FAILURE() << "steps = 0 accepted";
  } catch (const ht::Error& e) {
    EXPECT_NE(std::string(e.what()).find("local_sgd.steps"), std::string::npos) << e.what();
  }
}

// local_sgd.fragments and comm_dtype take "auto" too, round-trip as "auto", and are chosen with N only:
// without local_sgd.steps = auto (or with the per-step mode) they are refused naming the key.
TEST(Config, FragmentsAndDtypeAutoNeedStepsAuto) {
  const auto c = ht::config::load("", {"local_sgd.enabled=true", "local_sgd.steps=auto", "local_sgd.fragments=auto",
                                       "local_sgd.comm_dtype=auto", "model.n_layer=4"});
  EXPECT_EQ(c.local_sgd.fragments, ht::config::LocalSgdConfig::kAutoFragments);
  EXPECT_EQ(c.local_sgd.comm_dtype, ht::config::ExchangeDtype::kAuto);
  const std::string text = ht::config::to_toml(c);
  EXPECT_NE(text.find("fragments = \"auto\""), std::string::npos) << text;
  EXPECT_NE(text.find("comm_dtype = 'auto'"), std::string::npos) << text;
  EXPECT_EQ(ht::config::to_toml(ht::config::load_text(text, "round trip", {})), text);
  for (const std::string key : {"local_sgd.fragments", "local_sgd.comm_dtype"}) {
    std::string msg = error_of({"local_sgd.enabled=true", "local_sgd.steps=8", key + "=auto"});
    EXPECT_NE(msg.find("config key '" + key + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("local_sgd.steps = auto"), std::string::npos) << msg;
    msg = error_of({"local_sgd.enabled=false", key + "=auto"});
    EXPECT_NE(msg.find("config key '" + key + "'"), std::string::npos) << msg;
  }
  const std::string msg = error_of({"local_sgd.enabled=true", "local_sgd.steps=auto", "local_sgd.fragments=auto",
                                    "local_sgd.optimizer_state=average"});
  EXPECT_NE(msg.find("config key 'local_sgd.fragments'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer_state"), std::string::npos) << msg;
  EXPECT_NE(error_of({"local_sgd.fragments=0"}).find("local_sgd.fragments"), std::string::npos);
}

// With auto the cycle checks move to the choice (it offers only N that fit); what auto cannot model
// is refused before any rank trains.
TEST(Config, LocalStepsAutoChecks) {
  EXPECT_NO_THROW(ht::config::load("", {"local_sgd.enabled=true", "local_sgd.steps=auto", "model.n_layer=4",
                                        "local_sgd.fragments=4", "local_sgd.overlap_steps=2"}));
  std::string msg = error_of({"local_sgd.enabled=true", "local_sgd.steps=auto", "local_sgd.group_size=2"});
  EXPECT_NE(msg.find("local_sgd.steps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("group_size"), std::string::npos) << msg;
  msg = error_of({"local_sgd.steps=auto", "local_sgd.auto_step_penalty=-0.1"});
  EXPECT_NE(msg.find("local_sgd.auto_step_penalty"), std::string::npos) << msg;
  // A fixed N is still checked against the fragments and the overlap.
  msg = error_of({"local_sgd.enabled=true", "local_sgd.steps=6", "model.n_layer=4", "local_sgd.fragments=4"});
  EXPECT_NE(msg.find("local_sgd.fragments"), std::string::npos) << msg;
  msg = error_of({"local_sgd.steps=4", "local_sgd.overlap_steps=4"});
  EXPECT_NE(msg.find("local_sgd.overlap_steps"), std::string::npos) << msg;
}
