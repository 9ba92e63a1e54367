// Scratch directories for C++ tests: made under $TMPDIR (default /tmp) and removed when the
// process that made them exits, so that a suite run leaves nothing in /tmp. HT_KEEP_TEST_DIRS=1
// keeps them for a post-mortem. Only the creating process removes a directory: a forked child
// that exits (a death test, a spawned helper) must not delete what its parent still uses, and in
// an MPI test the rank that made the directory removes it after MPI_Finalize, when no rank reads it.
#pragma once
#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace ht::test {
namespace detail {

struct TempDirRegistry {
  std::mutex mutex;
  std::vector<std::string> dirs;
  pid_t owner = ::getpid();
  ~TempDirRegistry() {
    const char* keep = std::getenv("HT_KEEP_TEST_DIRS");
    if ((keep && *keep && std::string(keep) != "0") || ::getpid() != owner) return;
    // nftw, not std::filesystem::remove_all: at exit the latter binds to libtorch's exported copy,
    // whose state is already torn down (a segfault). Best effort: nothing to do with a failure here.
    for (const auto& d : dirs)
      ::nftw(d.c_str(), [](const char* p, const struct stat*, int, FTW*) { return std::remove(p); }, 16,
             FTW_DEPTH | FTW_PHYS);
  }
};

inline TempDirRegistry& temp_dirs() {
  static TempDirRegistry registry;
  return registry;
}

}  // namespace detail

// A new empty directory named <prefix>XXXXXX under $TMPDIR or /tmp; throws if it cannot be made.
inline std::string make_temp_dir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  if (::mkdtemp(path.data()) == nullptr) throw std::runtime_error("cannot create a test directory " + path);
  auto& registry = detail::temp_dirs();
  const std::lock_guard<std::mutex> lock(registry.mutex);
  registry.dirs.push_back(path);
  return path;
}

}  // namespace ht::test
