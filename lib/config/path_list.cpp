#include "config/path_list.h"

#include "core/error.h"

namespace ht::config {
namespace {

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

}  // namespace

std::vector<std::string> split_path_list(const std::string& key, const std::string& value) {
  std::vector<std::string> out;
  if (trimmed(value).empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(kPathListSeparator, start);
    const std::string entry = trimmed(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    HT_REQUIRE(!entry.empty(), ExitCode::kUsage, "config key '{}': empty entry in the path list '{}'", key, value);
    out.push_back(entry);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

}  // namespace ht::config
