// Dataset files written by `hpctrain prepare` and read by the trainer (format: docs/data-format.md).
// CONTRACT header written before the implementation; the data module owns and may extend it.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ht::data {

inline constexpr const char* kFormatName = "hpctrain-dataset";
inline constexpr int64_t kFormatVersion = 1;

// Root attributes and derived facts of a dataset file (validated when read).
struct DatasetMeta {
  std::string path;
  std::string task;       // "causal-lm" | "classification"
  int64_t vocab_size = 0;
  std::string tokenizer;  // "byte" | "bpe"
  int64_t pad_id = -1;    // padding token (classification input_ids)
  int64_t eos_id = -1;    // document separator
  std::vector<std::string> label_names;  // classification
  int64_t seq_len = 0;    // classification: width of input_ids; LM: 0 (chosen by the model)
  int64_t num_train_tokens = 0, num_val_tokens = 0;    // LM
  int64_t num_train_rows = 0, num_val_rows = 0;        // classification
};

// Opens, validates format/version/dtypes/shapes and returns the metadata. Throws ht::Error(kData)
// naming the file, the dataset and the fault.
DatasetMeta read_meta(const std::string& path);

// Human-readable layout + counts + checksum verification (for `hpctrain inspect`).
std::string describe(const std::string& path);

// --- additions by the data module ---

// Fails (kData) when the file's vocabulary does not fit a model with model_vocab_size
// embeddings (model_vocab_size < meta.vocab_size). 0 = no model constraint.
void check_vocab(const DatasetMeta& meta, int64_t model_vocab_size);

// Full name of a split's dataset: split_dataset("train", "tokens") == "/train/tokens".
std::string split_dataset(const std::string& split, const std::string& name);

// Samples in a split for a given context length (causal-lm: (tokens - 1) / seq_len; classification: rows).
int64_t num_samples(const DatasetMeta& meta, const std::string& split, int64_t seq_len);

}  // namespace ht::data
