#include "core/fs.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace ht::fs {

void make_dirs(const std::string& dir) {
  if (dir.empty()) return;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      HT_FAIL(ExitCode::kData, "{}: cannot create directory: {}", partial, std::strerror(errno));
  }
  struct stat st {};
  HT_REQUIRE(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), ExitCode::kData, "{}: not a directory", dir);
}

bool remove_tree(const std::string& path) {
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) -> int { return std::remove(p); };
  return ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0;
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace ht::fs
