// The steps of `hpctrain prepare` (prepare.cpp) that the sharded prepare (prepare_shards.cpp)
// runs on each rank for its part of the corpus: one implementation of options checking,
// tokenizer choice and file writing, so a shard holds exactly what the single file would.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/text_source.h"
#include "data/tokenizer.h"

namespace ht::data {

struct Corpus {
  std::vector<std::string> docs;
  std::vector<int32_t> labels;  // classification
  std::vector<std::string> label_names;
  uint64_t bytes = 0;
};

// Usage errors (kUsage) of the options; the same on every rank.
void validate_prepare(const PrepareOptions& o);

// The --inputs as (label, path), in order: with --labels-from-dirs each names its label (a label
// given twice is a usage error); without, every label is "".
std::vector<LabelInput> resolve_inputs(const PrepareOptions& o);

// byte, or BPE trained on docs (bytes: their size, for progress lines).
Tokenizer make_tokenizer(const PrepareOptions& o, const std::vector<std::string>& docs, uint64_t bytes);

// Writes the dataset file `tmp` from the corpus (val[d]: document d goes to /val); removes it on failure.
PrepareSummary write_dataset(const PrepareOptions& o, const std::string& tmp, const Corpus& c, const Tokenizer& tok,
                             const std::vector<bool>& val);

// Syncs `tmp` and renames it to `output` (then syncs the directory); removes `tmp` on failure.
void commit_dataset(const std::string& tmp, const std::string& output);

}  // namespace ht::data
