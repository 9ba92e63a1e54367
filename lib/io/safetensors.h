// The safetensors file format (Hugging Face), torch-free: a writer for byte views of tensors and a
// reader that validates every header field before any offset or size is trusted.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header, then the data region.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data region) plus an optional "__metadata__" object of strings.
// As the format's specification demands, the tensors tile the data region exactly: no gaps, no
// overlap, nothing after the last one. Data is little-endian and C-contiguous.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ht::io {

// Bytes per element of a safetensors dtype name ("F32", "BF16", ...); 0 for a name that is not a
// byte-sized safetensors dtype (the sub-byte F4/F6 types are rejected as unknown).
size_t safetensors_dtype_bytes(const std::string& dtype);

// One tensor to write: `bytes` must equal prod(shape) * dtype size; `data` is read, not owned.
struct SafeTensorView {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

// Writes `path` atomically: `<path>.tmp`, fsync, rename, so a failure leaves no partial file under
// `path`. Tensors are stored in the order given (the header lists them in that order too); callers
// wanting every tensor aligned to its element size put the wider dtypes first. The header is padded
// with spaces to a multiple of 8 bytes, as the reference writer does. Throws ht::Error(kData)
// naming the path and the tensor for a bad view (unknown dtype, negative dimension, size
// mismatch, duplicate or empty name, the reserved name "__metadata__") or an I/O failure.
void write_safetensors(const std::string& path, const std::vector<SafeTensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// One validated header entry; [begin, end) are byte offsets into the data region.
struct SafeTensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t bytes() const { return end - begin; }
  uint64_t numel() const;
};

// The parsed, validated header of a safetensors byte buffer.
struct SafeTensorsHeader {
  uint64_t header_bytes = 0;             // N: the JSON part, padding included
  uint64_t data_offset = 0;              // 8 + N: where the data region starts in the buffer
  std::vector<SafeTensorInfo> tensors;   // ordered by data offset
  std::map<std::string, std::string> metadata;
};

inline constexpr uint64_t kSafeTensorsMaxHeaderBytes = 100'000'000;  // the reference reader's limit

// Validates the whole header of `bytes[0, size_bytes)` (the fuzz entry point: any input either
// parses or throws ht::Error(kData), whose message starts with `label` and names the key or
// tensor at fault). Checks: size >= 8, N <= size - 8 and <= 100 MB, JSON object without
// duplicate keys, known dtype, non-negative integer shape, prod(shape) * dtype size equal to the
// offset span (overflow-checked), offsets inside the data region, tiling it exactly.
SafeTensorsHeader parse_safetensors(const uint8_t* bytes, size_t size_bytes, const std::string& label);

// A safetensors file mapped read-only into memory and validated once at open. (A file truncated by
// another process while mapped faults on access: files are replaced by rename, never rewritten.)
class SafeTensorsFile {
 public:
  // Maps and validates `path`; every failure is ht::Error(kData) naming the path.
  static SafeTensorsFile open(const std::string& path);
  // Validates an in-memory copy (tests, fuzzing); `label` stands for the file name in messages.
  static SafeTensorsFile from_bytes(std::string bytes, const std::string& label);

  const std::string& path() const { return path_; }
  const std::vector<SafeTensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr when absent.
  const SafeTensorInfo* find(const std::string& name) const;
  // Throws ht::Error(kData) naming the file and the tensor when absent.
  const SafeTensorInfo& at(const std::string& name) const;
  // The tensor's bytes inside the mapping (valid while this object lives); not necessarily
  // aligned to the element size, so copy (memcpy) rather than cast to a wider type.
  const uint8_t* data(const SafeTensorInfo& t) const { return base_ + header_.data_offset + t.begin; }

 private:
  SafeTensorsFile() = default;
  std::string path_;
  std::shared_ptr<const void> storage_;  // the mapping or the owned bytes; unmapped on release
  const uint8_t* base_ = nullptr;
  SafeTensorsHeader header_;
};

// Same as SafeTensorsFile::open(path).
SafeTensorsFile read_safetensors(const std::string& path);

}  // namespace ht::io
