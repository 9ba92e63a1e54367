// The Dataset handle that the loader, the evaluation reader and every sample reader of a rank
// share: one dataset file, or several files (shards) read as one. Each file is opened and checked
// once per rank (DatasetFile). Shards form one index space: each split is the concatenation of
// the shards' splits in shard order, so samples, their order and the loader state do not depend
// on how the data was cut into files (docs/data-format.md, "Shards").
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset_file.h"
#include "data/row_reader.h"
#include "data/tokenizer.h"

namespace ht::data {

class Dataset : public std::enable_shared_from_this<Dataset> {
 public:
  // One file (DatasetFile::open's checks and messages).
  static std::shared_ptr<const Dataset> open(const std::string& path);
  // Files in this order as one dataset. All must have the same task, tokenizer (kind and BPE
  // merges), vocab_size, pad/eos ids and, for classification, seq_len and label_names; else
  // ht::Error(kData) naming `key`, the odd shard, the field and the first shard's value.
  static std::shared_ptr<const Dataset> open_shards(const std::vector<std::string>& paths, const std::string& key);

  // The whole dataset: path = the shard paths joined by ','; token and row counts summed.
  const DatasetMeta& meta() const { return meta_; }
  const std::string& path() const { return meta_.path; }
  // The files, in shard order (absolute when opened through open(DataConfig)).
  std::vector<std::string> paths() const;
  int64_t num_shards() const { return static_cast<int64_t>(files_.size()); }
  const DatasetFile& shard(int64_t i) const { return *files_.at(static_cast<size_t>(i)); }
  // The first shard's HDF5 file: main thread only (Debian's HDF5 is not thread-safe).
  const io::File& h5() const { return files_.front()->h5(); }
  // Reader of one dataset name across all shards (one index space); keeps this Dataset alive.
  std::unique_ptr<RowReader> reader(const std::string& dataset, size_t cache_bytes) const;
  Tokenizer tokenizer() const { return files_.front()->tokenizer(); }
  // For checkpoints to recognise their data. One file: DatasetFile::identity (unchanged by
  // sharding support); several: "<hash of the shard identities in order>-<total bytes>-s<count>".
  std::string identity() const;

 private:
  Dataset(std::vector<std::shared_ptr<const DatasetFile>> files, DatasetMeta meta);
  std::vector<std::shared_ptr<const DatasetFile>> files_;
  DatasetMeta meta_;
};

// The files that the entries of a path list name (config::split_path_list of data.path): each
// entry is a path or a glob pattern (*, ?, [...]); the union, sorted by path, duplicates removed.
// Fails (kUsage, naming `key`) on a pattern that matches nothing and on a listed file that does not
// exist. Entries should be absolute (see run_setup) so the order does not depend on the directory.
std::vector<std::string> expand_shard_paths(const std::vector<std::string>& entries, const std::string& key);

// expand_shard_paths, then Dataset::open (one file) or Dataset::open_shards.
std::shared_ptr<const Dataset> open_dataset(const std::vector<std::string>& entries, const std::string& key);

// The one way a run opens its data: data.path's entries made absolute (so the order of shards and
// a checkpoint's stored list do not depend on the working directory), then open_dataset. `key`
// names the source in messages ("data.path", or a command-line option that replaced it).
std::shared_ptr<const Dataset> open(const config::DataConfig& cfg, const std::string& key = "data.path");

// Human-readable layout + counts + checksum verification of every chunk (`hpctrain inspect`).
std::string describe(const Dataset& data);

}  // namespace ht::data
