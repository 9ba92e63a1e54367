#include "data/row_reader.h"

#include <algorithm>

#include "core/error.h"
#include "core/hash.h"

namespace ht::data {

RowReader::RowReader(std::vector<std::unique_ptr<ChunkReader>> parts, std::shared_ptr<const void> owner)
    : owner_(std::move(owner)), parts_(std::move(parts)) {
  HT_REQUIRE(!parts_.empty(), ExitCode::kRuntime, "RowReader needs at least one part");
  first_.push_back(0);
  for (const auto& p : parts_) first_.push_back(first_.back() + p->rows());
}

int64_t RowReader::num_chunks() const {
  int64_t n = 0;
  for (const auto& p : parts_) n += p->num_chunks();
  return n;
}

void RowReader::read_rows(int64_t start, int64_t count, int64_t cols, int64_t* out) {
  HT_REQUIRE(start >= 0 && count >= 0 && start + count <= rows(), ExitCode::kRuntime,
             "{}: rows {}..{} outside the {} rows of {} shard(s)", name(), start, start + count, rows(), parts_.size());
  while (count > 0) {
    // The last part starting at or before `start` (empty parts start where the next one does).
    const auto p = static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), start) - first_.begin() - 1);
    const int64_t n = std::min(count, first_[p + 1] - start);
    parts_[p]->read_rows(start - first_[p], n, cols, out);
    out += n * cols;
    start += n;
    count -= n;
  }
}

int64_t RowReader::verify_all() {
  int64_t top = 0;
  for (auto& p : parts_) top = std::max(top, p->verify_all());
  return top;
}

uint64_t RowReader::checksum_digest() const {
  if (parts_.size() == 1) return parts_.front()->checksum_digest();
  uint64_t h = kFnvOffset;
  for (const auto& p : parts_) {
    const uint64_t d = p->checksum_digest();
    h = fnv1a(h, &d, sizeof d);
  }
  return h;
}

}  // namespace ht::data
