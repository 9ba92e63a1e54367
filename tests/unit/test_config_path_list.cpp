// data.path as a list: split from text (--set, --data), read from a TOML array, printed as one.
#include <gtest/gtest.h>

#include <functional>

#include "config/config.h"
#include "config/path_list.h"
#include "core/error.h"

using ht::config::split_path_list;

namespace {

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kUsage);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ConfigPathList, SplitTrimsAndKeepsOrder) {
  EXPECT_EQ(split_path_list("data.path", " /d/b.h5 ,/d/a.h5,\t/d/*.h5 "),
            (std::vector<std::string>{"/d/b.h5", "/d/a.h5", "/d/*.h5"}));
  EXPECT_EQ(split_path_list("data.path", "/d/one.h5"), (std::vector<std::string>{"/d/one.h5"}));
  EXPECT_TRUE(split_path_list("data.path", "").empty());
  EXPECT_TRUE(split_path_list("data.path", "  ").empty());
}

TEST(ConfigPathList, EmptyEntriesAreRefusedNamingTheKey) {
  for (const char* bad : {"a.h5,,b.h5", "a.h5,", ",a.h5", "a.h5, ,b.h5"}) {
    const std::string msg = usage_error_of([&] { split_path_list("data.path", bad); });
    EXPECT_NE(msg.find("config key 'data.path': empty entry in the path list"), std::string::npos) << bad << ": " << msg;
  }
}

// The config holds the list itself: a TOML array, a one-string list and --set give the same
// vector, and the dump prints it back as a TOML array that reads the same.
TEST(ConfigPathList, DataPathIsAListFromTomlArraysAndSetAndBackAgain) {
  const std::vector<std::string> want = {"/d/x-00000-of-00002.h5", "/d/x-00001-of-00002.h5", "/e/[ab].h5"};
  const auto a = ht::config::load_text(
      "[data]\npath = ['/d/x-00000-of-00002.h5', '/d/x-00001-of-00002.h5', '/e/[ab].h5']\n", "array", {});
  EXPECT_EQ(a.data.paths, want);
  const auto b = ht::config::load_text("", "set", {"data.path=/d/x-00000-of-00002.h5, /d/x-00001-of-00002.h5,/e/[ab].h5"});
  EXPECT_EQ(b.data.paths, want);
  const auto c = ht::config::load_text("[data]\npath = '/d/x-00000-of-00002.h5,/d/x-00001-of-00002.h5,/e/[ab].h5'\n",
                                       "string written by an earlier version", {});
  EXPECT_EQ(c.data.paths, want);
  const std::string dumped = ht::config::to_toml(a);
  EXPECT_NE(dumped.find("path = ['/d/x-00000-of-00002.h5', '/d/x-00001-of-00002.h5', '/e/[ab].h5']"), std::string::npos)
      << dumped;
  EXPECT_EQ(ht::config::load_text(dumped, "dump", {}).data.paths, want);
}

TEST(ConfigPathList, ArrayEntriesMustBeOnePathEach) {
  const std::string msg = usage_error_of([&] { ht::config::load_text("[data]\npath = ['a.h5,b.h5']\n", "t", {}); });
  EXPECT_NE(msg.find("data.path"), std::string::npos) << msg;
  const std::string empty = usage_error_of([&] { ht::config::load_text("[data]\npath = ['a.h5', '']\n", "t", {}); });
  EXPECT_NE(empty.find("data.path"), std::string::npos) << empty;
}
