#include "interop/export_target.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fs.h"

namespace ht::interop {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Entry names of dir, sorted (so a message names the same entries every time).
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// A checkpoint file (also one still being written, *.h5.tmp) or a pointer of lib/checkpoint.
bool is_checkpoint_entry(const std::string& name) {
  if (name == "latest" || name == "best") return true;
  return (starts_with(name, "ckpt-") || starts_with(name, "best-")) && name.find(".h5") != std::string::npos;
}

// Any other HDF5 file (a dataset): an export never holds one, so the directory is not an export.
bool is_hdf5_entry(const std::string& name) {
  return name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0;
}

// What a training run writes into train.output_dir besides its checkpoints.
bool is_run_entry(const std::string& name) {
  return name == "metrics.jsonl" || name == "config.toml" || name == "checkpoints";
}

std::string first_few(const std::vector<std::string>& names) {
  const size_t shown = std::min<size_t>(names.size(), 3);
  const std::vector<std::string> head(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown));
  return fmt::format("{}{}", fmt::join(head, ", "), names.size() > shown ? ", ..." : "");
}

// Why out must not be replaced, or "".
std::string protection(const std::string& out, const std::string& checkpoint) {
  // realpath on both: "run/./checkpoints", a symlink or a relative path name the same place.
  const std::string dir = fs::absolute_path(out), file = fs::absolute_path(checkpoint);
  if (file == dir || dir == "/" || starts_with(file, (dir + "/").c_str()))
    return fmt::format("it holds the checkpoint being exported ({})", checkpoint);
  std::vector<std::string> ckpts, run, hdf5;
  for (const auto& name : entries(out)) {
    if (is_checkpoint_entry(name)) ckpts.push_back(name);
    else if (is_run_entry(name)) run.push_back(name);
    else if (is_hdf5_entry(name)) hdf5.push_back(name);
  }
  if (!ckpts.empty()) return fmt::format("it holds checkpoints ({})", first_few(ckpts));
  if (!run.empty()) return fmt::format("it is a training run directory ({})", first_few(run));
  if (!hdf5.empty()) return fmt::format("it holds HDF5 files, which an export never does ({})", first_few(hdf5));
  return "";
}

}  // namespace

void require_replaceable_output(const std::string& out, const std::string& checkpoint) {
  const std::string why = protection(out, checkpoint);
  HT_REQUIRE(why.empty(), ExitCode::kUsage,
             "export: --force refused for --output {}: {}; --force replaces only a previous export, so nothing "
             "was changed (choose a new directory)",
             out, why);
}

std::string make_temp_dir_beside(const std::string& out) {
  for (int n = 0; n < 1000; ++n) {
    const std::string tmp = fmt::format("{}.tmp-{}-{}", out, ::getpid(), n);
    if (::mkdir(tmp.c_str(), 0755) == 0) return tmp;
    HT_REQUIRE(errno == EEXIST, ExitCode::kData, "export: cannot create a directory beside {}: {}", out,
               std::strerror(errno));
  }
  HT_FAIL(ExitCode::kData, "export: cannot create a directory beside {}: 1000 names taken", out);
}

}  // namespace ht::interop
