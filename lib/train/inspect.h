// `hpctrain inspect` of a checkpoint: the file's report (checkpoint::describe) plus the check that
// its tensors fit the model its own stored config describes (checkpoint::check_compatible, the
// same check resume and eval use).
#pragma once
#include <string>

namespace ht::train {

// The report; *ok is set to whether the file verified and fits its stored config. Throws only if
// the file cannot be opened.
std::string inspect_checkpoint(const std::string& path, bool* ok);

}  // namespace ht::train
