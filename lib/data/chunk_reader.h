// Direct reader of one chunked (or contiguous) integer dataset of an HDF5 file. The layout
// (chunk addresses, sizes, filters) is read once through HDF5 on the constructing thread; rows
// are then read with pread() and each chunk's Fletcher32 checksum is verified here, so the
// loader's prefetch thread never calls into HDF5 (the Debian HDF5 build is not thread-safe and
// the trainer uses HDF5 on the main thread for checkpoints). Verified chunks are kept in a
// small LRU cache. Supported: chunks spanning whole rows, no filter other than Fletcher32,
// little-endian integers of 1, 2, 4 or 8 bytes.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/h5.h"
#include "io/h5_chunks.h"

namespace ht::data {

// HDF5's Fletcher32 (H5_checksum_fletcher32), as its filter computes it over a chunk.
uint32_t fletcher32(const uint8_t* data, size_t len);

class ChunkReader {
 public:
  // file: the open HDF5 file (its path names it in messages); fd: a read-only descriptor of the
  // same file that outlives the reader (Dataset owns both); dataset: absolute name ("/train/tokens").
  ChunkReader(const io::File& file, int fd, const std::string& dataset, size_t cache_bytes = 64u << 20);
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  // Holds `owner` (the Dataset whose descriptor this reader uses) for the reader's lifetime.
  void keep_alive(std::shared_ptr<const void> owner) { owner_ = std::move(owner); }

  int64_t rows() const { return rows_; }
  int64_t row_elems() const { return row_elems_; }
  int64_t num_chunks() const { return static_cast<int64_t>(chunks_.size()); }
  int64_t chunk_rows() const { return chunk_rows_; }
  const std::string& name() const { return dataset_; }

  // Rows [start, start + count), the first `cols` elements of each (cols <= row_elems),
  // converted to int64 into out (count * cols values). Throws kData on a checksum mismatch
  // or a short read, naming the file, the dataset and the rows of the failing chunk.
  void read_rows(int64_t start, int64_t count, int64_t cols, int64_t* out);
  // Reads and verifies every chunk (for `inspect`); returns the largest value seen.
  int64_t verify_all();
  // A digest of the stored Fletcher32 checksums of every chunk (4 bytes read per chunk): it changes
  // with the content, at a tiny fraction of the cost of reading it. 0 for unchecksummed layouts.
  uint64_t checksum_digest() const;

 private:
  void read_layout(const io::File& file);
  const std::vector<uint8_t>& load_chunk(int64_t index);
  int64_t value_at(const uint8_t* p) const;

  std::string path_, dataset_;
  std::shared_ptr<const void> owner_;
  int fd_ = -1;
  int64_t rows_ = 0, row_elems_ = 1, chunk_rows_ = 0;
  size_t elem_bytes_ = 0;
  bool is_signed_ = false;
  std::vector<io::StoredChunk> chunks_;
  std::vector<uint8_t> contiguous_;  // compact datasets are held whole
  // LRU cache of verified chunk payloads.
  size_t cache_bytes_, cached_bytes_ = 0;
  std::list<int64_t> lru_;
  std::unordered_map<int64_t, std::pair<std::vector<uint8_t>, std::list<int64_t>::iterator>> cache_;
};

}  // namespace ht::data
