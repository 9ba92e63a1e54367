#include "data/sample_source.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace ht::data {

SampleSource::SampleSource(std::shared_ptr<const Dataset> data, const std::string& split, int64_t seq_len,
                           size_t cache_bytes)
    : data_(std::move(data)), split_(split) {
  HT_REQUIRE(split == "train" || split == "val", ExitCode::kUsage, "unknown split '{}' (train or val)", split);
  const DatasetMeta& meta = data_->meta();
  if (meta.task == config::Task::kCausalLm) {
    HT_REQUIRE(seq_len > 0, ExitCode::kUsage, "seq_len must be positive for the causal-lm dataset {}", meta.path);
    seq_len_ = seq_len;
    tokens_ = data_->reader(split_dataset(split, "tokens"), cache_bytes);
    const int64_t n = tokens_->rows();
    HT_REQUIRE(n > 0, ExitCode::kData, "{}:{}: zero tokens (empty split)", meta.path, split_dataset(split, "tokens"));
    samples_ = n > seq_len ? (n - 1) / seq_len : 0;
    HT_REQUIRE(samples_ > 0, ExitCode::kData,
               "{}:{}: {} tokens make no sample of seq_len + 1 = {} tokens; lower model.seq_len or add data",
               meta.path, split_dataset(split, "tokens"), n, seq_len + 1);
  } else {
    seq_len_ = seq_len > 0 ? seq_len : meta.seq_len;
    HT_REQUIRE(seq_len_ <= meta.seq_len, ExitCode::kData,
               "{}: seq_len {} exceeds the width {} of the classification rows; use model.seq_len <= {}", meta.path,
               seq_len_, meta.seq_len, meta.seq_len);
    input_ids_ = data_->reader(split_dataset(split, "input_ids"), cache_bytes);
    labels_ = data_->reader(split_dataset(split, "labels"), cache_bytes / 8);
    samples_ = input_ids_->rows();
    HT_REQUIRE(samples_ > 0, ExitCode::kData, "{}:{}: zero rows (empty split)", meta.path,
               split_dataset(split, "input_ids"));
  }
}

Batch SampleSource::read(const std::vector<int64_t>& ids) {
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  Batch b;
  if (tokens_) read_lm(ids, order, b);
  else read_cls(ids, order, b);
  b.sample_ids = torch::tensor(ids, torch::kInt64);
  b.num_tokens = static_cast<int64_t>(ids.size()) * seq_len_;
  return b;
}

void SampleSource::read_lm(const std::vector<int64_t>& ids, const std::vector<size_t>& order, Batch& b) {
  const int64_t B = static_cast<int64_t>(ids.size()), T = seq_len_;
  torch::Tensor buf = torch::empty({B, T + 1}, torch::kInt64);
  int64_t* p = buf.data_ptr<int64_t>();
  for (size_t slot : order) {
    const int64_t first = ids[slot] * T;
    int64_t* row = p + static_cast<int64_t>(slot) * (T + 1);
    tokens_->read_rows(first, T + 1, 1, row);
    const int64_t top = *std::max_element(row, row + T + 1);
    HT_REQUIRE(top < meta().vocab_size, ExitCode::kData, "{}:{}: token id {} >= vocab_size {} in rows {}..{}",
               meta().path, tokens_->name(), top, meta().vocab_size, first, first + T);
  }
  b.input = buf.narrow(1, 0, T).contiguous();
  b.target = buf.narrow(1, 1, T).contiguous();
}

void SampleSource::read_cls(const std::vector<int64_t>& ids, const std::vector<size_t>& order, Batch& b) {
  const int64_t B = static_cast<int64_t>(ids.size()), T = seq_len_;
  b.input = torch::empty({B, T}, torch::kInt64);
  b.target = torch::empty({B}, torch::kInt64);
  int64_t* x = b.input.data_ptr<int64_t>();
  int64_t* y = b.target.data_ptr<int64_t>();
  const auto num_labels = static_cast<int64_t>(meta().label_names.size());
  for (size_t slot : order) {
    const int64_t row = ids[slot];
    int64_t* out = x + static_cast<int64_t>(slot) * T;
    input_ids_->read_rows(row, 1, T, out);
    const int64_t top = *std::max_element(out, out + T);
    HT_REQUIRE(top < meta().vocab_size, ExitCode::kData, "{}:{}: token id {} >= vocab_size {} in row {}", meta().path,
               input_ids_->name(), top, meta().vocab_size, row);
    labels_->read_rows(row, 1, 1, y + slot);
    HT_REQUIRE(y[slot] >= 0 && y[slot] < num_labels, ExitCode::kData,
               "{}:{}: label {} in row {} is outside label_names (0..{})", meta().path, labels_->name(), y[slot], row,
               num_labels - 1);
  }
  b.mask = b.input.ne(meta().pad_id).to(torch::kInt64);
}

}  // namespace ht::data
