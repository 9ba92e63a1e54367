// train.sample_every_steps: rank 0 logs a short continuation of train.sample_prompt while
// training, to watch the model learn (as llm.c does). Sampling is passive: it draws only from a
// generator of its own (seeded by train.seed and the step), runs in eval mode without gradients
// and puts the module back into training mode, so a run ends with the same weights with it on or off.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "model/gpt.h"
#include "model/generate.h"

namespace ht::train {

class SampleLogger {
 public:
  // Encodes the prompt with the dataset's tokenizer once (rank 0 only; other ranks do nothing).
  SampleLogger(const config::Config& cfg, const data::Dataset& data, int rank);
  // Logs one sample when step is a multiple of train.sample_every_steps.
  void maybe_log(model::GptImpl& gpt, int64_t step);

 private:
  int64_t every_steps_ = 0;
  uint64_t seed_ = 0;
  std::optional<data::Tokenizer> tokenizer_;
  std::vector<int64_t> prompt_;
  model::SamplingOptions options_;
};

}  // namespace ht::train
