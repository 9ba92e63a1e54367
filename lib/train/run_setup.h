// Set-up of a run before any collective: the config resolved against its dataset (opened once
// here; the trainer and the evaluator reuse the handle), the output directory, the device.
// Every check here is one each rank can make alone, so app/ agrees on the outcome across ranks
// before anyone enters a collective.
#pragma once
#include <torch/types.h>

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "core/fs.h"
#include "data/dataset.h"

namespace ht::train {

struct RunSetup {
  config::Config cfg;                          // vocab_size / num_labels filled from the dataset, validated
  std::shared_ptr<const data::Dataset> data;   // opened and validated once
};

// Opens cfg.data.path, fills model.vocab_size and model.num_labels when 0, checks that the model
// fits the data (task, vocabulary, labels, classification width) and validates the result.
// Throws ht::Error(kUsage / kData) naming the key or the file.
RunSetup resolve_run(const config::Config& cfg);

// Creates train.output_dir when missing and, on the rank that writes (rank 0), the checkpoint
// directory, and locks both for this run (fs::DirectoryLock): a second job on the same
// directories is refused at start, naming the holder, instead of deleting this one's files.
// Throws kData naming a directory that cannot be written. Training only: evaluation writes nothing.
// The locks last as long as the returned objects.
std::vector<fs::DirectoryLock> prepare_output_dirs(const config::Config& cfg, bool writes);

// Picks CPU or cuda:<local rank> per train.device and sets the intra-op thread count.
torch::Device select_device(const config::TrainConfig& cfg, comm::Communicator& comm);

}  // namespace ht::train
