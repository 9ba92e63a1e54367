// Reads samples of one split of a dataset file (see loader.h for what a sample is) and checks
// the values actually read: token ids below vocab_size, labels inside label_names.
// Built on the constructing thread (HDF5 calls); read() uses only pread (any one thread).
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/dataset.h"
#include "data/row_reader.h"

namespace ht::data {

class SampleSource {
 public:
  SampleSource(std::shared_ptr<const Dataset> data, const std::string& split, int64_t seq_len, size_t cache_bytes);
  const DatasetMeta& meta() const { return data_->meta(); }
  int64_t size() const { return samples_; }
  int64_t seq_len() const { return seq_len_; }
  // The samples ids, in this order (read in ascending order for locality).
  Batch read(const std::vector<int64_t>& ids);

 private:
  void read_lm(const std::vector<int64_t>& ids, const std::vector<size_t>& order, Batch& b);
  void read_cls(const std::vector<int64_t>& ids, const std::vector<size_t>& order, Batch& b);

  std::shared_ptr<const Dataset> data_;  // keeps the shared descriptor of the chunk readers open
  std::string split_;
  int64_t seq_len_ = 0, samples_ = 0;
  std::unique_ptr<RowReader> tokens_, input_ids_, labels_;  // across all shards
};

}  // namespace ht::data
