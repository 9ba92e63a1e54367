// docs/config.md documents every key the binary accepts (the README points users there).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "config/config.h"

TEST(ConfigDocs, EveryKeyIsDocumented) {
  const char* src = std::getenv("HPCTRAIN_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "HPCTRAIN_SOURCE_DIR is set by ctest";
  std::ifstream in(std::string(src) + "/docs/config.md");
  ASSERT_TRUE(in.good());
  std::stringstream doc;
  doc << in.rdbuf();
  std::istringstream keys(ht::config::describe_keys());
  std::string line;
  int n = 0;
  while (std::getline(keys, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    EXPECT_NE(doc.str().find("`" + key + "`"), std::string::npos) << key << " missing from docs/config.md";
    ++n;
  }
  EXPECT_GT(n, 50);
}

// The tables of docs/config.md are the key table's own rendering (`hpctrain train
// --help-config-markdown`): a changed default, type or meaning must reach the docs too.
TEST(ConfigDocs, TablesAreGeneratedFromTheKeyTable) {
  const char* src = std::getenv("HPCTRAIN_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "HPCTRAIN_SOURCE_DIR is set by ctest";
  std::ifstream in(std::string(src) + "/docs/config.md");
  std::stringstream doc;
  doc << in.rdbuf();
  std::istringstream rows(ht::config::describe_keys_markdown());
  std::string line;
  while (std::getline(rows, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    EXPECT_NE(doc.str().find(line + "\n"), std::string::npos)
        << "docs/config.md lacks this row (regenerate with `hpctrain train --help-config-markdown`):\n" << line;
  }
}
