// One dataset file written by `hpctrain prepare` (format: docs/data-format.md): the metadata,
// validated once at open, and the DatasetFile handle that every chunk reader of a rank shares, so
// a file is opened and checked once per rank. Several files (shards) form one Dataset (dataset.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/tokenizer.h"
#include "io/h5.h"

namespace ht::data {

inline constexpr const char* kFormatName = "hpctrain-dataset";
inline constexpr int64_t kFormatVersion = 1;

// Root attributes and derived facts of a dataset file (validated when read).
struct DatasetMeta {
  std::string path;
  config::Task task = config::Task::kCausalLm;
  int64_t vocab_size = 0;
  TokenizerKind tokenizer = TokenizerKind::kByte;
  int64_t pad_id = -1;    // padding token (classification input_ids)
  int64_t eos_id = -1;    // document separator
  std::vector<std::string> label_names;  // classification
  int64_t seq_len = 0;    // classification: width of input_ids; LM: 0 (chosen by the model)
  int64_t num_train_tokens = 0, num_val_tokens = 0;    // LM
  int64_t num_train_rows = 0, num_val_rows = 0;        // classification
};

class ChunkReader;

class DatasetFile : public std::enable_shared_from_this<DatasetFile> {
 public:
  // Opens the file (one HDF5 handle and one read-only descriptor), validates format, version,
  // dtypes and shapes, and reads the metadata. Throws ht::Error(kData) naming the file, the
  // dataset and the fault.
  static std::shared_ptr<const DatasetFile> open(const std::string& path);
  ~DatasetFile();
  DatasetFile(const DatasetFile&) = delete;
  DatasetFile& operator=(const DatasetFile&) = delete;

  const DatasetMeta& meta() const { return meta_; }
  const std::string& path() const { return meta_.path; }
  // The HDF5 file: main thread only (Debian's HDF5 is not thread-safe).
  const io::File& h5() const { return file_; }
  // Reader of one integer dataset ("/train/tokens"): its layout is read now through HDF5, its
  // rows later with pread on the shared descriptor, from any one thread. The reader keeps this
  // DatasetFile (and so the descriptor) alive.
  std::unique_ptr<ChunkReader> reader(const std::string& dataset, size_t cache_bytes) const;
  Tokenizer tokenizer() const;
  // What this file is, for checkpoints to recognise their data: the file size, a hash of the
  // metadata and a digest of every chunk checksum ("<16 hex digits>-<bytes>"). Reads 4 bytes per chunk.
  std::string identity() const;

 private:
  DatasetFile(io::File file, int fd, DatasetMeta meta);
  io::File file_;
  int fd_ = -1;
  DatasetMeta meta_;
};

// DatasetFile::open(path)->meta(), for callers that need nothing else.
DatasetMeta read_meta(const std::string& path);

// Fails (kData) when the file's vocabulary does not fit a model with model_vocab_size
// embeddings (model_vocab_size < meta.vocab_size). 0 = no model constraint.
void check_vocab(const DatasetMeta& meta, int64_t model_vocab_size);

// Full name of a split's dataset: split_dataset("train", "tokens") == "/train/tokens".
std::string split_dataset(const std::string& split, const std::string& name);

// Samples in a split for a given context length (causal-lm: (tokens - 1) / seq_len; classification: rows).
int64_t num_samples(const DatasetMeta& meta, const std::string& split, int64_t seq_len);

// True when the file's root attribute `format` names a dataset (a cheap look for `inspect`).
bool is_dataset_file(const std::string& path);

}  // namespace ht::data
