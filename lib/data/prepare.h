// `hpctrain prepare`: text inputs -> one dataset file, or one shard per rank under mpirun
// (format and shard rules: docs/data-format.md). Deterministic: the same inputs and options give
// the same file contents.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/tokenizer.h"

namespace ht::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or directories; with labels_from_dirs one per label ("NAME=PATH" allowed)
  std::string output;
  TokenizerKind tokenizer = TokenizerKind::kByte;
  int64_t vocab_size = 0;           // bpe: target vocabulary (>= 258); 0 = 1024. byte: must be 0 or 258
  double val_fraction = 0.05;       // share of documents in /val (hash of seed and document index)
  bool labels_from_dirs = false;    // classification: each input is one label
  int64_t seq_len = 128;            // classification: row width (truncate / pad with pad_id)
  int64_t seed = 1234;
  bool progress = true;             // log progress lines on large inputs
};

struct PrepareSummary {
  config::Task task = config::Task::kCausalLm;
  int64_t vocab_size = 0;
  int64_t train_docs = 0, val_docs = 0;
  int64_t train_tokens = 0, val_tokens = 0;  // causal-lm; classification: rows * seq_len
  std::vector<std::string> labels;
  uint64_t input_bytes = 0;
};

// Writes <output>.tmp-<pid> and renames it to <output> on success (removed on failure).
PrepareSummary prepare(const PrepareOptions& opts);

// Collective, every rank of comm: the input files (in the order prepare reads them) are cut into
// comm.size() contiguous ranges of about equal bytes, at least one file each; rank r writes the
// documents of its range to shard_path(output, r, size). The shards concatenated in rank order
// hold the documents, tokens and train/val split of prepare(opts) (BPE: rank 0 trains the
// vocabulary on all inputs and broadcasts it). Causal-lm only. Errors are agreed: every rank
// throws the same error, no rank hangs. Returns this rank's summary.
PrepareSummary prepare_shards(const PrepareOptions& opts, comm::Communicator& comm);

// "<output without .h5>-<rank:05d>-of-<size:05d>.h5": data/f.h5 -> data/f-00001-of-00003.h5.
std::string shard_path(const std::string& output, int rank, int size);

// Which documents go to validation: hash(seed, index) < val_fraction, and at least one document
// when val_fraction > 0 and there are two or more documents (the train split keeps at least one).
std::vector<bool> assign_validation(int64_t num_docs, double val_fraction, int64_t seed);

}  // namespace ht::data
