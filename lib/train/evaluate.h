// Evaluation over a whole validation split, sharded across ranks and reduced as sums of counts
// (not averages of averages), so the result is identical for any number of ranks.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/loader.h"
#include "model/gpt.h"

namespace ht::train {

struct EvalResult {
  std::string task;
  double loss = 0.0;        // mean cross-entropy per token (LM) or per sample (classification)
  double accuracy = 0.0;    // next-token accuracy (LM) or sample accuracy
  double perplexity = 0.0;  // LM only
  double f1 = 0.0;          // classification: macro F1 over labels
  int64_t count = 0;        // tokens (LM) or samples (classification) evaluated
};

// Sums gathered per rank; reduced over ranks by evaluate().
struct EvalSums {
  double loss_sum = 0.0;
  int64_t correct = 0;
  int64_t count = 0;
  std::vector<int64_t> confusion;  // num_labels x num_labels, [true][pred]
};

// Macro F1 from a num_labels x num_labels confusion matrix (labels absent from both truth and
// prediction are left out of the mean, as scikit-learn's zero_division behaviour would make them 0).
double macro_f1(const std::vector<int64_t>& confusion, int64_t num_labels);

// Runs the model in eval mode over the reader; max_batches = 0 reads this rank's whole shard.
EvalResult evaluate(model::Gpt& gpt, data::EvalReader& reader, comm::Communicator& comm, const torch::Device& device,
                    int64_t max_batches = 0);

}  // namespace ht::train
