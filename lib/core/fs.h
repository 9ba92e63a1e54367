// Small POSIX file-system helpers. std::filesystem is avoided on purpose: libtorch.so exports its
// own copy of std::filesystem symbols, calls bind to it, and remove_all crashes through it.
#pragma once
#include <string>

namespace ht::fs {

// mkdir -p; throws ht::Error(kData) naming the directory on failure.
void make_dirs(const std::string& dir);
// rm -rf; returns false if something could not be removed.
bool remove_tree(const std::string& path);
std::string parent_dir(const std::string& path);  // "" when path has no '/'

}  // namespace ht::fs
