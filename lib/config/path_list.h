// A list of paths written as one string ("a.h5,b.h5": what --set data.path=... and the --data and
// --check options take). The config holds the list itself (DataConfig::paths) and prints it as a
// TOML array; only text typed by a user is split here.
#pragma once
#include <string>
#include <vector>

namespace ht::config {

inline constexpr char kPathListSeparator = ',';

// Entries of a path list, surrounding spaces trimmed. "" gives no entries; an empty entry
// ("a.h5,,b.h5", a trailing ',') is a usage error naming `key`.
std::vector<std::string> split_path_list(const std::string& key, const std::string& value);

}  // namespace ht::config
