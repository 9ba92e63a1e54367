// Small POSIX file-system helpers. std::filesystem is avoided on purpose: libtorch.so exports its
// own copy of std::filesystem symbols, calls bind to it, and remove_all crashes through it.
#pragma once
#include <string>

namespace ht::fs {

// mkdir -p; throws ht::Error(kData) naming the directory on failure.
void make_dirs(const std::string& dir);
// mkdir -p, then requires a directory this process may create files in. `what` says whose
// directory it is in the message ("checkpoint directory", "train.output_dir"); throws kData.
void ensure_writable_dir(const std::string& dir, const std::string& what);
// rm -rf; returns false if something could not be removed.
bool remove_tree(const std::string& path);
std::string parent_dir(const std::string& path);  // "" when path has no '/'
// The absolute, symlink-free path of an existing file (realpath(3)); path itself when that fails.
std::string absolute_path(const std::string& path);

// An exclusive advisory lock (flock) on <dir>/.hpctrain.lock, held until destruction or process
// exit (the kernel releases it when the process dies, even by SIGKILL). The file records the
// holder (host, pid, Slurm job, start time), so a second run on the same directory is refused
// with a message that names the holder.
class DirectoryLock {
 public:
  DirectoryLock() = default;
  // Throws ht::Error(kUsage) naming `what`, the directory and the holder when it is locked.
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirectoryLock& operator=(DirectoryLock&& o) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ht::fs
