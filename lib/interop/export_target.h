// The directory `export` writes into: whether an existing one may be replaced under --force, and
// the temporary directory beside it that becomes it. --force replaces a previous export; it must
// never take a training run's work with it (checkpoints, the `latest`/`best` pointers, a run
// directory, or the checkpoint being exported), because the old directory is deleted afterwards.
#pragma once
#include <string>

namespace ht::interop {

// Throws ht::Error(kUsage) naming --output and the reason when `out` (an existing directory) holds
// the checkpoint `checkpoint` (or is it), holds checkpoint files or pointers, is a run directory,
// or holds other HDF5 files (datasets). Reads only directory entries; call before reading the
// checkpoint.
void require_replaceable_output(const std::string& out, const std::string& checkpoint);

// A new empty directory `<out>.tmp-<pid>-<n>` beside out, made by mkdir(0755) like any directory
// (mkdtemp would give 0700, which the final rename would keep and other users could not read).
// Throws ht::Error(kData) naming out.
std::string make_temp_dir_beside(const std::string& out);

}  // namespace ht::interop
