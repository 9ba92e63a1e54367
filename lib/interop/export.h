// `hpctrain export --format hf`: a checkpoint's averaged model as a Hugging Face GPT-2 directory
// (config.json, model.safetensors, tokenizer.json, tokenizer_config.json; for a classification
// model also classification_head.safetensors). The directory is written beside its final place
// and renamed into it, so a failure leaves nothing half-written under the output name.
#pragma once
#include <string>
#include <vector>

namespace ht::interop {

struct ExportOptions {
  std::string checkpoint;
  std::string output_dir;
  std::string data_path;  // "" = the checkpoint config's data.path (where the tokenizer comes from)
  bool force = false;     // replace a non-empty output_dir
};

struct ExportReport {
  std::vector<std::string> files;  // names inside output_dir
  int64_t parameters = 0;
  int64_t step = 0;
};

// Refuses (kUsage) an existing non-empty output_dir without force, and with force one that holds
// checkpoints, a run or the checkpoint itself (export_target.h), before reading anything. The
// directory gets the mode mkdir gives (0755 under the umask), its files 0644 under the umask.
// Throws ht::Error naming the file or option at fault.
ExportReport export_hf(const ExportOptions& o);

}  // namespace ht::interop
