// A trained model as a checkpoint holds it, ready for inference or export: the file read and
// verified, the model its stored config describes with the averaged weights (/model), and the
// tokenizer of the dataset that config names (checkpoints store no tokenizer).
#pragma once
#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "data/tokenizer.h"
#include "model/gpt.h"

namespace ht::interop {

struct SavedModel {
  config::Config cfg;       // the checkpoint's resolved config
  model::Gpt gpt{nullptr};  // on the CPU, eval mode
  int64_t step = 0;
  std::string path;
  std::string dataset_identity;  // of the data it was trained on ("" in files written before)
};

// Reads and verifies the checkpoint, builds its model and loads /model. Throws ht::Error(kData)
// naming the file when it is damaged or not a checkpoint, kUsage when its tensors do not fit the
// model its config describes.
SavedModel load_saved_model(const std::string& checkpoint_path);

// The tokenizer of the dataset at data_path ("" = the config's data.path). Refused (kData, naming
// the file) when that file is missing or holds other data than the model was trained on: its
// tokenizer could then encode differently.
data::Tokenizer saved_tokenizer(const SavedModel& m, const std::string& data_path = "");

}  // namespace ht::interop
