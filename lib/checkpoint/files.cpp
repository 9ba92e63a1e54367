#include "checkpoint/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <regex>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/timer.h"

// POSIX calls only: libtorch.so exports its own std::filesystem symbols, and calls into them
// (e.g. remove_all) crash when they bind there instead of libstdc++.
namespace ht::checkpoint {
namespace {

std::string join(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Names in dir (not "." or ".."); empty if it cannot be read.
std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

const std::regex& name_pattern() {
  static const std::regex re("^ckpt-([0-9]+)\\.h5$");
  return re;
}

// The step in a best checkpoint's name (best-<step>.h5): outside the rotation's pattern.
std::optional<int64_t> best_step_of(const std::string& file_name) {
  static const std::regex re("^best-([0-9]+)\\.h5$");
  std::smatch m;
  if (!std::regex_match(file_name, m, re) || m[1].length() > 18) return std::nullopt;
  return std::stoll(m[1].str());
}

// The step in a checkpoint's name; nullopt for other names, and for digits beyond int64 (a
// stray file must not make every save and resume fail).
std::optional<int64_t> step_of(const std::string& file_name) {
  std::smatch m;
  if (!std::regex_match(file_name, m, name_pattern()) || m[1].length() > 18) return std::nullopt;
  return std::stoll(m[1].str());
}

}  // namespace

std::string file_name_for_step(int64_t step) { return fmt::format("ckpt-{:08d}.h5", step); }
std::string best_file_name_for_step(int64_t step) { return fmt::format("best-{:08d}.h5", step); }

std::string resolve_pointer(const std::string& dir, const std::string& pointer) {
  HT_REQUIRE(pointer == "latest" || pointer == "best", ExitCode::kUsage,
             "checkpoint pointer '{}': expected latest or best", pointer);
  const auto name = pointer == "latest" ? detail::read_latest(dir) : detail::read_best(dir);
  HT_REQUIRE(name.has_value(), ExitCode::kData, "{}/{}: no such checkpoint pointer{}", dir, pointer,
             pointer == "best" ? " (is checkpoint.keep_best = true in that run?)" : "");
  const std::string path = join(dir, *name);
  HT_REQUIRE(is_regular(path), ExitCode::kData, "{}/{} names {}, which does not exist", dir, pointer, path);
  return path;
}

std::string new_run_id() {
  char host[64] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return fmt::format("{}-{}-{}-{:08x}", host, ::getpid(), static_cast<int64_t>(std::time(nullptr)), rd());
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& name : dir_entries(dir))
    if (auto step = step_of(name); step && is_regular(join(dir, name))) found.emplace_back(*step, join(dir, name));
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

namespace detail {
namespace {

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  HT_REQUIRE(fd >= 0, ExitCode::kData, "{}: open for fsync failed: {}", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  HT_REQUIRE(rc == 0, ExitCode::kData, "{}: fsync failed: {}", path, std::strerror(err));
}

void rename_path(const std::string& from, const std::string& to) {
  HT_REQUIRE(::rename(from.c_str(), to.c_str()) == 0, ExitCode::kData, "rename {} -> {} failed: {}", from, to,
             std::strerror(errno));
}

// Small text file replaced atomically (tmp + fsync + rename + fsync dir).
void write_text_atomically(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = join(dir, name), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    HT_REQUIRE(out.good(), ExitCode::kData, "{}: write failed", tmp);
  }
  fsync_path(tmp, false);
  rename_path(tmp, path);
  fsync_path(dir, true);
}

// Leftovers of saves that died half-way (SIGKILL, node failure): never valid, safe to drop.
void remove_stale_tmps(const std::string& dir) {
  for (const auto& name : dir_entries(dir)) {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 && name.rfind("ckpt-", 0) == 0) {
      HT_INFO("removing {} left by an interrupted save", join(dir, name));
      ::unlink(join(dir, name).c_str());
    }
  }
}

// HDF5 1.10 leaves a file id in a broken state when a write fails mid-way (disk full), and its
// atexit cleanup then crashes the process. So the space is reserved first with fallocate(2) on a
// probe file: a full disk, a quota or a file size limit becomes a clean error before HDF5 writes.
// (Space taken by someone else between the probe and the write is not covered.)
void reserve_space(const std::string& probe, int64_t bytes) {
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  HT_REQUIRE(fd >= 0, ExitCode::kData, "{}: cannot create: {}", probe, std::strerror(errno));
  const int rc = ::fallocate(fd, 0, 0, bytes);
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (rc != 0 && (err == EOPNOTSUPP || err == ENOSYS)) return;  // file system without fallocate: no check
  HT_REQUIRE(rc == 0, ExitCode::kData, "not enough space for a checkpoint of ~{:.1f} MB in {}: {}",
             static_cast<double>(bytes) / 1e6, probe.substr(0, probe.rfind('/')), std::strerror(err));
}

int64_t estimated_bytes(const Snapshot& shared, const std::vector<TensorMap>& per_rank) {
  int64_t bytes = 1 << 20;  // metadata, state values, attributes
  for (const auto& [k, t] : shared.tensors) bytes += static_cast<int64_t>(t.nbytes()) * (t.element_size() < 4 ? 4 / t.element_size() : 1);
  for (const auto& m : per_rank)
    for (const auto& [k, t] : m) bytes += static_cast<int64_t>(t.nbytes());
  for (const auto& [k, v] : shared.strings) bytes += static_cast<int64_t>(v.size());
  return bytes + bytes / 50;  // chunk index and checksum overhead
}

// Keeps the file just written plus the newest keep-1 earlier files of the same run. Files of
// other runs (another run_id, or none) are not this run's to delete, and files with a higher step
// than the one just written belong to a timeline this run abandoned by resuming from an earlier
// checkpoint (one of them may be the damaged file it fell back from): they stay until this run
// overwrites them by reaching their step.
void rotate(const std::string& dir, int64_t keep, const std::string& just_written, int64_t step,
            const std::string& run_id) {
  if (run_id.empty()) return;
  int64_t kept = 1;
  for (const auto& path : list_checkpoints(dir)) {
    if (path == just_written) continue;
    const auto file_step = step_of(path.substr(path.rfind('/') + 1));
    if (!file_step || *file_step >= step || run_id_of(path) != run_id) continue;
    if (kept < keep) { ++kept; continue; }
    if (::unlink(path.c_str()) != 0) HT_WARN("could not delete old checkpoint {}: {}", path, std::strerror(errno));
    else HT_DEBUG("deleted old checkpoint {}", path);
  }
}

}  // namespace

namespace {

// tmp -> fsync -> rename -> fsync(dir): the file carries its final name only once complete.
std::string write_durably(const std::string& dir, const std::string& name, const Snapshot& shared,
                          const std::vector<TensorMap>& per_rank, int64_t step, int64_t world_size) {
  fs::ensure_writable_dir(dir, "checkpoint directory");
  remove_stale_tmps(dir);
  const std::string path = join(dir, name), tmp = path + ".tmp";
  Stopwatch clock;
  reserve_space(path + ".space.tmp", estimated_bytes(shared, per_rank));
  try {
    write_file(tmp, shared, per_rank, step, world_size);
    fsync_path(tmp, false);
    rename_path(tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_path(dir, true);
  struct stat st {};
  const auto bytes = ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
  HT_DEBUG("checkpoint saved: {} (step {}, {:.1f} MB, {:.2f} s)", path, step, static_cast<double>(bytes) / 1e6,
          clock.seconds());
  return path;
}

// The checkpoint is complete and durable before its pointer moves: a failure here is a warning.
void update_pointer(const std::string& dir, const std::string& pointer, const std::string& name,
                    const std::string& path) {
  try {
    write_text_atomically(dir, pointer, name + "\n");
  } catch (const std::exception& e) {
    HT_WARN("checkpoint {} written but `{}` not updated: {}", path, pointer, e.what());
  }
}

}  // namespace

std::string commit_checkpoint(const std::string& dir, const Snapshot& shared, const std::vector<TensorMap>& per_rank,
                              int64_t step, int64_t world_size, int64_t keep) {
  const std::string name = file_name_for_step(step);
  const std::string path = write_durably(dir, name, shared, per_rank, step, world_size);
  update_pointer(dir, "latest", name, path);
  rotate(dir, keep, path, step, shared.run_id);
  return path;
}

std::string commit_best(const std::string& dir, const Snapshot& shared, const std::vector<TensorMap>& per_rank,
                        int64_t step, int64_t world_size) {
  const std::string name = best_file_name_for_step(step);
  const std::string path = write_durably(dir, name, shared, per_rank, step, world_size);
  update_pointer(dir, "best", name, path);
  // The previous best of this run is superseded; other runs' files are not ours to delete.
  for (const auto& entry : dir_entries(dir)) {
    if (entry == name || !best_step_of(entry) || shared.run_id.empty()) continue;
    const std::string old = join(dir, entry);
    if (run_id_of(old) != shared.run_id) continue;
    if (::unlink(old.c_str()) != 0) HT_WARN("could not delete superseded best checkpoint {}: {}", old, std::strerror(errno));
  }
  return path;
}

std::optional<std::string> read_latest(const std::string& dir) {
  std::ifstream in(join(dir, "latest"));
  std::string name;
  if (!in || !std::getline(in, name)) return std::nullopt;
  if (!step_of(name)) return std::nullopt;  // not one of our names: ignore rather than follow
  return name;
}

std::optional<std::string> read_best(const std::string& dir) {
  std::ifstream in(join(dir, "best"));
  std::string name;
  if (!in || !std::getline(in, name) || !best_step_of(name)) return std::nullopt;
  return name;
}

std::vector<std::string> load_candidates(const std::string& dir) {
  std::vector<std::string> out;
  if (auto latest = read_latest(dir)) out.push_back(join(dir, *latest));
  for (auto& p : list_checkpoints(dir))
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  return out;
}

}  // namespace detail
}  // namespace ht::checkpoint
