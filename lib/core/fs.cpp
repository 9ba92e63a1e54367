#include "core/fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

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

void ensure_writable_dir(const std::string& dir, const std::string& what) {
  HT_REQUIRE(!dir.empty(), ExitCode::kData, "{} is empty", what);
  try {
    make_dirs(dir);
  } catch (const Error& e) {
    HT_FAIL(ExitCode::kData, "{} {} cannot be created: {}", what, dir, e.what());
  }
  HT_REQUIRE(::access(dir.c_str(), W_OK | X_OK) == 0, ExitCode::kData, "{} {} is not writable: {}", what, dir,
             std::strerror(errno));
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

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/.hpctrain.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  HT_REQUIRE(fd_ >= 0, ExitCode::kData, "{} {}: cannot create the lock file {}: {}", what, dir, path,
             std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[512] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("unknown");
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    HT_REQUIRE(err != EWOULDBLOCK, ExitCode::kUsage,
               "{} {} is in use by another run ({}); give each job its own directory", what, dir, who);
    HT_FAIL(ExitCode::kData, "{} {}: cannot lock {}: {}", what, dir, path, std::strerror(err));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::time_t now = std::time(nullptr);
  char when[32] = {0};
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", std::localtime(&now));
  const std::string me = std::string("pid ") + std::to_string(::getpid()) + " on host " + host +
                         (job ? std::string(", Slurm job ") + job : std::string()) + ", since " + when + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t w = ::pwrite(fd_, me.data(), me.size(), 0);
    (void)w;  // the holder text is informative only
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

std::string absolute_path(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return path;
  std::string out = resolved;
  std::free(resolved);
  return out;
}

}  // namespace ht::fs
