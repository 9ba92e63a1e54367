// data.path as a list: the one string form that --set, TOML arrays, dumps and checkpoints share.
#include <gtest/gtest.h>

#include <functional>

#include "config/path_list.h"
#include "core/error.h"

using ht::config::join_path_list;
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

TEST(ConfigPathList, JoinIsTheInverseOfSplit) {
  const std::vector<std::string> entries = {"/d/x-00000-of-00002.h5", "/d/x-00001-of-00002.h5", "/e/[ab].h5"};
  const std::string joined = join_path_list("data.path", entries);
  EXPECT_EQ(joined, "/d/x-00000-of-00002.h5,/d/x-00001-of-00002.h5,/e/[ab].h5");
  EXPECT_EQ(split_path_list("data.path", joined), entries);
  EXPECT_EQ(join_path_list("data.path", {}), "");
}

TEST(ConfigPathList, JoinRefusesWhatSplitCouldNotGiveBack) {
  for (const std::string bad : {"/d/a,b.h5", "", "  "}) {
    const std::string msg = usage_error_of([&] { join_path_list("data.path", {"/d/ok.h5", bad}); });
    EXPECT_NE(msg.find("config key 'data.path': list entry '" + bad + "'"), std::string::npos) << msg;
  }
}
