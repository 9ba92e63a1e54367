// TensorBoard event files, torch- and protobuf-free: the TFRecord framing (length, masked CRC32C,
// payload, masked CRC32C), a hand-rolled encoder for the few `Event`/`Summary` protobuf fields
// TensorBoard's scalar and text dashboards read, and TensorBoardWriter, which appends such records
// to `events.out.tfevents.<unix_time>.<suffix>`.
//
// Field numbers (tensorboard/compat/proto): Event{wall_time=1 double, step=2 int64, file_version=3,
// summary=5}; Summary{value=1}; Summary.Value{tag=1, simple_value=2 float, tensor=8, metadata=9};
// SummaryMetadata{plugin_data=1{plugin_name=1}}; TensorProto{dtype=1 (DT_STRING=7),
// tensor_shape=2, string_val=8}. Encoding follows proto3 as the Python serializer does (fields in
// number order, zero step and wall time omitted), so a record is byte-identical to protobuf's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ht::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t bytes);
// TFRecord's masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t bytes);
// One TFRecord: uint64 LE length, masked CRC of those 8 bytes, payload, masked CRC of the payload.
std::string frame_record(const std::string& payload);

// Serialized `Event` messages (payloads, unframed).
std::string encode_file_version_event(double wall_time_s);  // file_version "brain.Event:2"
std::string encode_scalar_event(double wall_time_s, int64_t step, const std::string& tag, float value);
// A text-plugin summary: a scalar DT_STRING tensor holding `text` (markdown in the dashboard).
std::string encode_text_event(double wall_time_s, int64_t step, const std::string& tag, const std::string& text);

// Appends events to a new file `<dir>/events.out.tfevents.<unix_time>.<suffix>` (created with
// O_EXCL; `.1`, `.2`, ... are added after the suffix if another writer took the name in the same
// second). One file per process and run: a resumed run starts a new file in the same directory and
// TensorBoard merges them. Every error is ht::Error(kData) naming the file.
class TensorBoardWriter {
 public:
  // `suffix` is usually the host name; it must be non-empty and hold no '/'. `dir` must exist.
  TensorBoardWriter(const std::string& dir, const std::string& suffix);
  ~TensorBoardWriter();  // flushes and closes; never throws
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::string& path() const { return path_; }
  // The value is stored as a 32-bit float (TensorBoard's simple_value).
  void scalar(const std::string& tag, double value, int64_t step);
  void text(const std::string& tag, const std::string& text, int64_t step);
  // Hands buffered records to the OS so a running TensorBoard sees them (no fsync: a lost tail
  // after a crash costs log lines, not training state).
  void flush();

 private:
  void append(const std::string& payload);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace ht::train
