// Rows of one dataset ("/train/tokens") across the files of a Dataset, as one index space: the
// rows of shard 0, then those of shard 1, ... A read that crosses a shard boundary is split, so a
// causal-lm sample may take its tokens from two shards exactly as from one concatenated file.
// Same threading as ChunkReader: built on the main thread, read from any one thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/chunk_reader.h"

namespace ht::data {

class RowReader {
 public:
  // parts: one reader per shard, in shard order (same dataset name and row width in each);
  // owner: what keeps the parts' descriptors open (the Dataset).
  RowReader(std::vector<std::unique_ptr<ChunkReader>> parts, std::shared_ptr<const void> owner);

  int64_t rows() const { return first_.back(); }
  int64_t row_elems() const { return parts_.front()->row_elems(); }
  const std::string& name() const { return parts_.front()->name(); }
  int64_t num_chunks() const;
  int64_t chunk_rows() const { return parts_.front()->chunk_rows(); }

  // Global rows [start, start + count): see ChunkReader::read_rows (errors name the shard's file).
  void read_rows(int64_t start, int64_t count, int64_t cols, int64_t* out);
  // Reads and verifies every chunk of every shard; the largest value seen.
  int64_t verify_all();
  // One shard: its ChunkReader::checksum_digest; several: a hash of theirs in order.
  uint64_t checksum_digest() const;

 private:
  std::shared_ptr<const void> owner_;  // declared first: outlives the parts that read through it
  std::vector<std::unique_ptr<ChunkReader>> parts_;
  std::vector<int64_t> first_;  // first global row of each part, then the total
};

}  // namespace ht::data
