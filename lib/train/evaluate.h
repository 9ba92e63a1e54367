// Evaluation over a whole validation split, sharded across ranks and reduced as sums of counts
// (not averages of averages), so the result is identical for any number of ranks; and the
// evaluation of a saved checkpoint (`hpctrain eval`).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "train/run_setup.h"

namespace ht::train {

struct EvalResult {
  config::Task task = config::Task::kCausalLm;
  double loss = 0.0;        // mean cross-entropy per token (LM) or per sample (classification)
  double accuracy = 0.0;    // next-token accuracy (LM) or sample accuracy
  double perplexity = 0.0;  // LM only
  double f1 = 0.0;          // classification: macro F1 over labels
  int64_t count = 0;        // tokens (LM) or samples (classification) evaluated
  int64_t labels_present = 0;  // classification: distinct true labels among the evaluated samples
  // Standard error of `loss` as an estimate over samples (sequences for the LM: their tokens are
  // not independent): the sample standard deviation of the per-sample mean losses / sqrt(samples).
  // Differences between runs smaller than about two of these are noise.
  double loss_stderr = 0.0;
  int64_t samples = 0;
};

// Sums gathered per rank; reduced over ranks by evaluate().
struct EvalSums {
  double loss_sum = 0.0;
  double sample_sum = 0.0, sample_sq = 0.0;  // per-sample mean losses, for the standard error
  int64_t samples = 0;
  int64_t correct = 0;
  int64_t count = 0;
  std::vector<int64_t> confusion;  // num_labels x num_labels, [true][pred]
};

// Macro F1 from a num_labels x num_labels confusion matrix (labels absent from both truth and
// prediction are left out of the mean, as scikit-learn's zero_division behaviour would make them 0).
double macro_f1(const std::vector<int64_t>& confusion, int64_t num_labels);

// Whether eval.strategy asks for an evaluation after optimizer step `step`.
bool evaluation_due(const config::EvalConfig& eval, int64_t step, int64_t steps_per_epoch);

// Runs the model in eval mode over this rank's part of the reader's samples.
EvalResult evaluate(model::Gpt& gpt, data::EvalReader& reader, comm::Communicator& comm, const torch::Device& device);

// The validation reader of a run: eval.max_batches > 0 limits it to a seeded random subset of
// eval.max_batches x eval.batch_size samples in all (seed data.seed), the same for any rank count.
std::unique_ptr<data::EvalReader> make_eval_reader(const config::Config& cfg, std::shared_ptr<const data::Dataset> data,
                                                   comm::Communicator& comm);

// Collective. Builds the model of setup.cfg, loads the checkpoint's parameters (refused when the
// checkpoint does not fit that model: checkpoint::check_compatible) and evaluates the val split.
EvalResult evaluate_checkpoint(const RunSetup& setup, const std::string& checkpoint_path, comm::Communicator& comm);

}  // namespace ht::train
