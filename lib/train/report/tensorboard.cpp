#include "train/report/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace ht::train {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "TFRecord and protobuf fixed fields are little-endian");

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// ---- protobuf wire format: just what Event/Summary need ----------------------------------------

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t{field} << 3) | type); }

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

template <typename T>
void put_fixed(std::string& out, uint32_t field, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "fixed32 or fixed64");
  put_key(out, field, sizeof(T) == 8 ? kFixed64 : kFixed32);
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.append(raw, sizeof(T));
}

// Event header fields; proto3 leaves zero values out, and so do we (byte-identical records).
std::string event_prefix(double wall_time_s, int64_t step) {
  std::string e;
  if (wall_time_s != 0.0) put_fixed(e, 1, wall_time_s);
  if (step != 0) {
    put_key(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));  // int64: negatives take 10 bytes, as protobuf does
  }
  return e;
}

std::string summary_event(double wall_time_s, int64_t step, const std::string& value) {
  std::string summary;
  put_bytes(summary, 1, value);  // Summary.value (repeated; one per event here)
  std::string e = event_prefix(wall_time_s, step);
  put_bytes(e, 5, summary);      // Event.summary
  return e;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

// A name nobody has taken: O_EXCL, so two writers never share (and interleave) one file.
std::FILE* create_exclusive(const std::string& base, std::string& path) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    path = attempt == 0 ? base : base + "." + std::to_string(attempt);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    HT_REQUIRE(fd >= 0, ExitCode::kData, "{}: cannot create the TensorBoard event file: {}", path, std::strerror(errno));
    std::FILE* f = ::fdopen(fd, "wb");
    if (f == nullptr) {
      const int err = errno;
      ::close(fd);
      HT_FAIL(ExitCode::kData, "{}: fdopen failed: {}", path, std::strerror(err));
    }
    return f;
  }
  HT_FAIL(ExitCode::kData, "{}: 1000 event files of this name already exist", base);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes) {
  static const std::array<uint32_t, 256> kTable = make_crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < bytes; ++i) c = kTable[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t bytes) {
  const uint32_t c = crc32c(data, bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += payload;
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

std::string encode_file_version_event(double wall_time_s) {
  std::string e = event_prefix(wall_time_s, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string encode_scalar_event(double wall_time_s, int64_t step, const std::string& tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_fixed(v, 2, value);  // simple_value: inside a oneof, so written even when 0
  return summary_event(wall_time_s, step, v);
}

std::string encode_text_event(double wall_time_s, int64_t step, const std::string& tag, const std::string& text) {
  std::string tensor;
  put_key(tensor, 1, kVarint);
  put_varint(tensor, 7);          // dtype DT_STRING
  put_bytes(tensor, 2, "");       // tensor_shape {}: a scalar
  put_bytes(tensor, 8, text);     // string_val
  std::string plugin_data;
  put_bytes(plugin_data, 1, "text");  // plugin_name; content (TextPluginData v0) is empty
  std::string metadata;
  put_bytes(metadata, 1, plugin_data);
  std::string v;
  put_bytes(v, 1, tag);
  put_bytes(v, 8, tensor);
  put_bytes(v, 9, metadata);
  return summary_event(wall_time_s, step, v);
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, const std::string& suffix) {
  HT_REQUIRE(!suffix.empty() && suffix.find('/') == std::string::npos, ExitCode::kData,
             "{}: TensorBoard file suffix '{}' must be non-empty and hold no '/'", dir, suffix);
  const auto unix_s = static_cast<int64_t>(now_s());
  file_ = create_exclusive(fmt::format("{}/events.out.tfevents.{:010d}.{}", dir, unix_s, suffix), path_);
  try {
    append(encode_file_version_event(now_s()));
    flush();
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);  // errors here are unreportable: flush() reports them
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  append(encode_scalar_event(now_s(), step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::text(const std::string& tag, const std::string& text, int64_t step) {
  append(encode_text_event(now_s(), step, tag, text));
}

void TensorBoardWriter::flush() {
  HT_REQUIRE(std::fflush(file_) == 0, ExitCode::kData, "{}: flush failed: {}", path_, std::strerror(errno));
}

void TensorBoardWriter::append(const std::string& payload) {
  const std::string record = frame_record(payload);
  HT_REQUIRE(std::fwrite(record.data(), 1, record.size(), file_) == record.size(), ExitCode::kData,
             "{}: write failed: {}", path_, std::strerror(errno));
}

}  // namespace ht::train
