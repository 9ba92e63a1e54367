// Where a dataset's chunks lie in its file, for readers that read them with pread() and verify
// their Fletcher32 checksums themselves (data::ChunkReader: its prefetch thread must not call into
// HDF5, which Debian builds without thread safety). Everything here calls HDF5: use it on the thread
// that owns HDF5, once per dataset, before handing the locations to another thread.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/h5.h"

namespace ht::io {

// One chunk as stored.
struct StoredChunk {
  bool written = false;      // false: never written (no storage allocated for it)
  uint64_t address = 0;      // its first byte in the file, the userblock included: ready for pread
  uint64_t stored_bytes = 0;  // on disk: the payload, plus 4 checksum bytes when checksummed
  bool checksummed = false;  // the Fletcher32 filter ran on it (a chunk may skip a filter)
};

// The storage of one dataset of an open file (opened with io::open_dataset's checks).
class ChunkStorage {
 public:
  ChunkStorage(Id file, const std::string& dataset);

  // False for contiguous or compact storage (no chunks: read it whole with read_whole).
  bool chunked() const { return chunked_; }
  // Chunk extent per dimension (chunked storage only).
  const std::vector<Size>& chunk_dims() const { return chunk_dims_; }
  // The name of the first filter other than Fletcher32 in the pipeline ("" when there is none):
  // such a chunk holds bytes that only HDF5 can decode.
  const std::string& unsupported_filter() const { return unsupported_filter_; }
  // The chunk whose first element is at `offset` (one coordinate per dimension).
  StoredChunk chunk_at(const std::vector<Size>& offset) const;
  // The whole dataset in its stored element type (no conversion) into out; kData on a failed read.
  void read_whole(void* out) const;

 private:
  Id file_;
  std::string name_;
  Handle dataset_;
  bool chunked_ = false;
  std::vector<Size> chunk_dims_;
  int fletcher32_filter_ = -1;  // its index in the filter pipeline; -1: no checksum
  std::string unsupported_filter_;
  uint64_t base_address_ = 0;
};

}  // namespace ht::io
