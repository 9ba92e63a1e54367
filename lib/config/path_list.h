// `data.path` as a list: several dataset files (shards) and glob patterns in one config string.
// The string form is what --set, the TOML dump and checkpoints carry: entries joined by ','
// (a TOML array of strings is read into the same form), so a path containing ',' cannot be listed.
#pragma once
#include <string>
#include <vector>

namespace ht::config {

inline constexpr char kPathListSeparator = ',';

// Entries of a path list, surrounding spaces trimmed. "" gives no entries; an empty entry
// ("a.h5,,b.h5", a trailing ',') is a usage error naming `key`.
std::vector<std::string> split_path_list(const std::string& key, const std::string& value);

// The string form of entries (inverse of split_path_list). Fails naming `key` on an entry that
// holds the separator or is empty.
std::string join_path_list(const std::string& key, const std::vector<std::string>& entries);

}  // namespace ht::config
