// Regression tests for what scripts/fuzz.sh found in the config parser (tests/fuzz/fuzz_config.cpp):
// each case is the input the fuzzer kept, replayed through the public API.
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"
#include "core/error.h"

namespace {

std::string usage_error(const std::string& toml, const std::vector<std::string>& sets) {
  try {
    ht::config::load_text(toml, "test.toml", sets);
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kUsage) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace

// fuzz_config crash-14ddba4f: `--set log.metrics_file=` with control characters, NULs and bytes
// that are not UTF-8 was accepted, and the config then did not read back from its own TOML
// (stored in every checkpoint): toml++ escapes a raw byte 0xFE as \u00FE, which reads back as
// the two bytes of U+00FE.
TEST(ConfigFuzzRegression, SetStringWithControlBytesAndInvalidUtf8IsRefused) {
  const std::string crash("log.metrics_file= 6tric\x01\x00" "fil\x01\x00\x7f\xfe\x9fW\x16", 35);
  const std::string msg = usage_error("", {crash});
  EXPECT_NE(msg.find("log.metrics_file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("control character"), std::string::npos) << msg;
}

TEST(ConfigFuzzRegression, StringsMustBeValidUtf8WithoutControlCharacters) {
  for (const std::string& bad : {std::string("data.path=a\xfe" "b"), std::string("data.path=\xc3"),
                                std::string("data.path=\xc0\xaf"),         // overlong '/'
                                std::string("data.path=\xed\xa0\x80"),     // a surrogate
                                std::string("data.path=\xf4\x90\x80\x80"), // above U+10FFFF
                                std::string("train.output_dir=runs/\x7f"), std::string("train.output_dir=a\nb")}) {
    const std::string msg = usage_error("", {bad});
    EXPECT_NE(msg.find(bad.substr(0, bad.find('='))), std::string::npos) << msg;
  }
  // The TOML side: a file is UTF-8 by definition, but its escapes can still produce control characters.
  EXPECT_NE(usage_error("[data]\npath = \"a\\u0000b\"\n", {}).find("data.path"), std::string::npos);
  EXPECT_NE(usage_error("[log]\nmetrics_file = \"m\\tx\"\n", {}).find("log.metrics_file"), std::string::npos);
}

TEST(ConfigFuzzRegression, NonAsciiTextRoundTripsThroughTheStoredToml) {
  const auto c = ht::config::load_text("", "test", {"data.path=daten/größe-東京-😀.h5", "train.output_dir=runs/é'\"x"});
  const std::string dumped = ht::config::to_toml(c);
  const auto d = ht::config::load_text(dumped, "dump", {});
  EXPECT_EQ(d.data.paths, std::vector<std::string>{"daten/größe-東京-😀.h5"});
  EXPECT_EQ(d.train.output_dir, "runs/é'\"x");
  EXPECT_EQ(ht::config::to_toml(d), dumped);
}
