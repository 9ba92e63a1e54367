// The Trainer (the Hugging Face `Trainer` level): from a resolved run (train/run_setup.h) it
// builds model, optimizer, local SGD, recompute, loader and checkpointing, resumes if asked, and
// runs the loop:
//   micro-batches (accumulation) -> backward -> [gradient all-reduce] -> clip -> AdamW -> schedule
//   -> [local SGD average every N] -> log / eval / checkpoint / signal check.
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "train/run_setup.h"

namespace ht::train {

struct ResumeRequest {
  bool latest = false;       // --resume: newest valid checkpoint in the checkpoint dir (fresh start if none)
  std::string from_file;     // --resume-from FILE
};

class Trainer {
 public:
  // Collective. Builds everything from the resolved run and resumes if asked.
  Trainer(const RunSetup& setup, comm::Communicator& comm, const ResumeRequest& resume);
  ~Trainer();
  // Runs to the end. Returns 0, ExitCode::kRuntime after a non-finite loss (train.nan_policy =
  // stop), or ExitCode::kRequeue after a signal-triggered checkpoint.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ht::train
