// The Trainer (the Hugging Face `Trainer` level): builds model, data, optimizer, local SGD,
// recompute and checkpointing from one Config and runs the loop:
//   micro-batches (accumulation) -> backward -> [gradient all-reduce] -> clip -> AdamW -> schedule
//   -> [local SGD average every N] -> log / eval / checkpoint / signal check.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "config/config.h"
#include "train/evaluate.h"

namespace ht::train {

struct ResumeRequest {
  bool latest = false;       // --resume: newest valid checkpoint in the checkpoint dir (fresh start if none)
  std::string from_file;     // --resume-from FILE
};

// Non-collective checks every rank can make alone (dataset metadata vs model config, output
// directory): fills vocab_size / num_labels from the dataset and validates. Run before any collective.
// meta, when given, receives the dataset metadata that was read.
config::Config resolve_with_dataset(const config::Config& cfg, data::DatasetMeta* meta = nullptr);

// `hpctrain eval`: builds the model of cfg, loads the checkpoint's parameters, evaluates the val split.
EvalResult evaluate_checkpoint(const config::Config& cfg, const std::string& checkpoint_path, comm::Communicator& comm);

// Picks CPU or cuda:<local rank> per train.device and sets the intra-op thread count.
torch::Device select_device(const config::TrainConfig& cfg, comm::Communicator& comm);

class Trainer {
 public:
  // Setup: validates the data against the config, builds everything, resumes if asked.
  // Errors here are identical on all ranks where possible (config, data meta).
  Trainer(const config::Config& cfg, comm::Communicator& comm, const ResumeRequest& resume);
  ~Trainer();
  // Runs to the end. Returns 0, or ExitCode::kRequeue after a signal-triggered checkpoint.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ht::train
