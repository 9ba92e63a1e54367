#include "data/chunk_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/hash.h"
#include "io/h5.h"
#include "io/h5_chunks.h"

namespace ht::data {

uint32_t fletcher32(const uint8_t* data, size_t len_bytes) {
  size_t len = len_bytes / 2;
  uint32_t sum1 = 0, sum2 = 0;
  while (len) {  // 360 words keep the sums from overflowing before the fold
    size_t tlen = len > 360 ? 360 : len;
    len -= tlen;
    do {
      sum1 += static_cast<uint32_t>((static_cast<uint16_t>(data[0]) << 8) | static_cast<uint16_t>(data[1]));
      data += 2;
      sum2 += sum1;
    } while (--tlen);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (len_bytes % 2) {
    sum1 += static_cast<uint32_t>(static_cast<uint16_t>(*data) << 8);
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

namespace {

bool checksum_matches(const uint8_t* chunk, size_t stored_bytes) {
  const size_t n = stored_bytes - 4;
  const uint8_t* s = chunk + n;  // stored little-endian (UINT32ENCODE)
  const uint32_t stored = uint32_t(s[0]) | uint32_t(s[1]) << 8 | uint32_t(s[2]) << 16 | uint32_t(s[3]) << 24;
  const uint32_t f = fletcher32(chunk, n);
  // HDF5 < 1.6.3 wrote the halves byte-swapped; its filter accepts both, and so do we.
  const uint32_t swapped = ((f & 0x00ff00ffu) << 8) | ((f & 0xff00ff00u) >> 8);
  return stored == f || stored == swapped;
}

void pread_all(int fd, uint8_t* out, size_t n, off_t offset, const std::string& where) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, out + done, n - done, offset + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    HT_REQUIRE(r >= 0, ExitCode::kData, "{}: read failed: {}", where, std::strerror(errno));
    HT_REQUIRE(r > 0, ExitCode::kData, "{}: file is truncated (data ends before byte {})", where,
               static_cast<uint64_t>(offset) + n);
    done += static_cast<size_t>(r);
  }
}

}  // namespace

ChunkReader::ChunkReader(const io::File& file, int fd, const std::string& dataset, size_t cache_bytes)
    : path_(file.path()), dataset_(dataset), fd_(fd), cache_bytes_(cache_bytes) {
  read_layout(file);
}

ChunkReader::~ChunkReader() = default;

void ChunkReader::read_layout(const io::File& file) {
  const std::string where = path_ + ":" + dataset_;
  const auto inf = io::info(file.id(), dataset_);
  HT_REQUIRE(inf.type_class == io::TypeClass::kInteger, ExitCode::kData, "{}: not an integer dataset", where);
  io::require_plain_integer(file.id(), dataset_, inf);  // the bytes are decoded here, not by HDF5
  elem_bytes_ = inf.type_size;
  is_signed_ = inf.is_signed;
  HT_REQUIRE(!inf.dims.empty(), ExitCode::kData, "{}: scalar where an array is expected", where);
  io::require_within_file(file.id(), dataset_, inf);  // before any table of the declared size is built
  rows_ = static_cast<int64_t>(inf.dims[0]);
  for (size_t i = 1; i < inf.dims.size(); ++i) row_elems_ *= static_cast<int64_t>(inf.dims[i]);
  const io::ChunkStorage storage(file.id(), dataset_);
  const size_t row_bytes = static_cast<size_t>(row_elems_) * elem_bytes_;
  if (!storage.chunked()) {  // contiguous or compact: small, hold it in memory (read by HDF5 here)
    contiguous_.resize(static_cast<size_t>(rows_) * row_bytes);
    if (!contiguous_.empty()) storage.read_whole(contiguous_.data());
    return;
  }
  HT_REQUIRE(storage.unsupported_filter().empty(), ExitCode::kData,
             "{}: filter '{}' is not supported (the format allows Fletcher32 only, no compression)", where,
             storage.unsupported_filter());
  const std::vector<io::Size>& chunk = storage.chunk_dims();
  for (size_t i = 1; i < chunk.size(); ++i)
    HT_REQUIRE(chunk[i] == inf.dims[i], ExitCode::kData, "{}: chunks must span whole rows", where);
  chunk_rows_ = static_cast<int64_t>(chunk[0]);
  HT_REQUIRE(chunk_rows_ > 0, ExitCode::kData, "{}: chunks of zero rows", where);
  const uint64_t payload = static_cast<uint64_t>(chunk_rows_) * row_bytes;
  const int64_t n = rows_ == 0 ? 0 : (rows_ + chunk_rows_ - 1) / chunk_rows_;
  chunks_.resize(static_cast<size_t>(n));
  std::vector<io::Size> offset(chunk.size(), 0);
  for (int64_t c = 0; c < n; ++c) {
    offset[0] = static_cast<io::Size>(c * chunk_rows_);
    io::StoredChunk& k = chunks_[static_cast<size_t>(c)];
    k = storage.chunk_at(offset);
    const uint64_t expected = payload + (k.checksummed ? 4 : 0);
    HT_REQUIRE(!k.written || k.stored_bytes == expected, ExitCode::kData,
               "{}: chunk of rows {}..{} has {} bytes, expected {} (damaged file)", where, offset[0],
               std::min<int64_t>(rows_, (c + 1) * chunk_rows_) - 1, k.stored_bytes, expected);
  }
}

const std::vector<uint8_t>& ChunkReader::load_chunk(int64_t index) {
  auto hit = cache_.find(index);
  if (hit != cache_.end()) {
    lru_.splice(lru_.begin(), lru_, hit->second.second);
    return hit->second.first;
  }
  const io::StoredChunk& k = chunks_[static_cast<size_t>(index)];
  const int64_t first = index * chunk_rows_, last = std::min(rows_, first + chunk_rows_) - 1;
  HT_REQUIRE(k.written, ExitCode::kData, "{}:{}: rows {}..{} were never written (chunk missing)",
             path_, dataset_, first, last);
  std::vector<uint8_t> buf(static_cast<size_t>(k.stored_bytes));
  pread_all(fd_, buf.data(), buf.size(), static_cast<off_t>(k.address), path_ + ":" + dataset_);
  HT_REQUIRE(!k.checksummed || checksum_matches(buf.data(), buf.size()), ExitCode::kData,
             "checksum mismatch in {}:{} rows {}..{} (the file is damaged; re-run `hpctrain prepare`)", path_,
             dataset_, first, last);
  if (k.checksummed) buf.resize(buf.size() - 4);
  while (!lru_.empty() && cached_bytes_ + buf.size() > cache_bytes_) {
    auto victim = cache_.find(lru_.back());
    cached_bytes_ -= victim->second.first.size();
    cache_.erase(victim);
    lru_.pop_back();
  }
  lru_.push_front(index);
  cached_bytes_ += buf.size();
  auto& slot = cache_[index];
  slot.first = std::move(buf);
  slot.second = lru_.begin();
  return slot.first;
}

int64_t ChunkReader::value_at(const uint8_t* p) const {
  switch (elem_bytes_) {
    case 1: return is_signed_ ? int64_t(int8_t(p[0])) : int64_t(p[0]);
    case 2: { uint16_t v; std::memcpy(&v, p, 2); return is_signed_ ? int64_t(int16_t(v)) : int64_t(v); }
    case 4: { uint32_t v; std::memcpy(&v, p, 4); return is_signed_ ? int64_t(int32_t(v)) : int64_t(v); }
    default: { int64_t v; std::memcpy(&v, p, 8); return v; }
  }
}

void ChunkReader::read_rows(int64_t start, int64_t count, int64_t cols, int64_t* out) {
  HT_REQUIRE(start >= 0 && count >= 0 && start + count <= rows_ && cols <= row_elems_, ExitCode::kData,
             "{}:{}: rows {}..{} outside a dataset of {} rows", path_, dataset_, start, start + count - 1, rows_);
  const size_t row_bytes = static_cast<size_t>(row_elems_) * elem_bytes_;
  for (int64_t r = start; r < start + count;) {
    const uint8_t* base;
    int64_t first_row, avail;
    if (chunk_rows_ == 0) {
      base = contiguous_.data();
      first_row = 0;
      avail = rows_ - r;
    } else {
      const int64_t c = r / chunk_rows_;
      base = load_chunk(c).data();  // the reference stays valid until the next load_chunk
      first_row = c * chunk_rows_;
      avail = first_row + chunk_rows_ - r;
    }
    const int64_t n = std::min(avail, start + count - r);
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* row = base + static_cast<size_t>(r + i - first_row) * row_bytes;
      for (int64_t j = 0; j < cols; ++j) *out++ = value_at(row + static_cast<size_t>(j) * elem_bytes_);
    }
    r += n;
  }
}

uint64_t ChunkReader::checksum_digest() const {
  uint64_t h = kFnvOffset;
  for (const io::StoredChunk& k : chunks_) {
    if (!k.checksummed || !k.written) continue;
    uint8_t stored[4];
    pread_all(fd_, stored, 4, static_cast<off_t>(k.address + k.stored_bytes - 4), path_ + ":" + dataset_);
    h = fnv1a(h, stored, 4);
  }
  return h;
}

int64_t ChunkReader::verify_all() {
  int64_t max_value = INT64_MIN;
  const int64_t step = chunk_rows_ > 0 ? chunk_rows_ : std::max<int64_t>(1, rows_);
  std::vector<int64_t> buf;
  for (int64_t r = 0; r < rows_; r += step) {
    const int64_t n = std::min(step, rows_ - r);
    buf.resize(static_cast<size_t>(n * row_elems_));
    read_rows(r, n, row_elems_, buf.data());
    for (int64_t v : buf) max_value = std::max(max_value, v);
  }
  return max_value;
}

}  // namespace ht::data
