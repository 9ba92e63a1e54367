#include "train/report/sample_log.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <string>

#include "core/log.h"

namespace ht::train {

SampleLogger::SampleLogger(const config::Config& cfg, const data::Dataset& data, int rank) {
  if (rank != 0 || cfg.train.sample_every_steps <= 0) return;
  tokenizer_ = data.tokenizer();
  for (auto id : tokenizer_->encode(cfg.train.sample_prompt)) prompt_.push_back(id);
  if (prompt_.empty()) prompt_.push_back(data::kEosId);  // an empty prompt starts a new document
  const int64_t room = (cfg.model.max_seq_len > 0 ? cfg.model.max_seq_len : cfg.model.seq_len) -
                       static_cast<int64_t>(prompt_.size());
  if (room < 1) {
    HT_WARN("train.sample_prompt is {} tokens, the position table has no room after it: no samples logged",
            prompt_.size());
    return;
  }
  options_.max_new_tokens = std::min(cfg.train.sample_tokens, room);
  options_.temperature = cfg.train.sample_temperature;
  every_steps_ = cfg.train.sample_every_steps;
  seed_ = static_cast<uint64_t>(cfg.train.seed);
}

void SampleLogger::maybe_log(model::GptImpl& gpt, int64_t step) {
  if (every_steps_ <= 0 || step % every_steps_ != 0) return;
  // A fresh private generator per sample: no training RNG stream is touched.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ULL + static_cast<uint64_t>(step));
  const auto ids = model::generate(gpt, prompt_, options_, gen);
  std::vector<int64_t> all = prompt_;
  all.insert(all.end(), ids.begin(), ids.end());
  std::string text;  // one log line: line breaks and tabs shown escaped
  for (char c : tokenizer_->decode(all)) text += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
  HT_INFO("sample at step {}: \"{}\"", step, text);
}

}  // namespace ht::train
