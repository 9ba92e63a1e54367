#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/fs.h"

namespace ht::io {
namespace {

constexpr int kMaxJsonDepth = 16;  // a valid header nests 3 deep; the bound keeps hostile input cheap
constexpr const char* kMetadataKey = "__metadata__";

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; this host is not");

// prod(shape) * elem_bytes, or false on overflow or a negative dimension.
bool checked_span_bytes(const std::vector<int64_t>& shape, uint64_t elem_bytes, uint64_t& out) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  return !__builtin_mul_overflow(n, elem_bytes, &out);
}

// ---- reading -----------------------------------------------------------------------------------

// Parses the header JSON, refusing duplicate keys (nlohmann would keep the last silently) and
// nesting deeper than kMaxJsonDepth.
nlohmann::json parse_header_json(const uint8_t* begin, uint64_t n, const std::string& label) {
  std::vector<std::set<std::string>> keys_per_object;
  auto check = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxJsonDepth)
      HT_FAIL(ExitCode::kData, "{}: header JSON nests deeper than {} levels", label, kMaxJsonDepth);
    if (event == E::object_start) keys_per_object.emplace_back();
    if (event == E::object_end && !keys_per_object.empty()) keys_per_object.pop_back();
    if (event == E::key && !keys_per_object.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      HT_REQUIRE(keys_per_object.back().insert(key).second, ExitCode::kData,
                 "{}: header JSON has the key '{}' twice in one object", label, key);
    }
    return true;
  };
  const char* text = reinterpret_cast<const char*>(begin);
  // JSON text never holds a raw NUL, and nlohmann stops at one: "{}\0junk" would pass as "{}".
  HT_REQUIRE(std::memchr(text, '\0', n) == nullptr, ExitCode::kData, "{}: header is not valid JSON: it holds a NUL byte",
             label);
  try {
    return nlohmann::json::parse(text, text + n, check);
  } catch (const nlohmann::json::exception& e) {
    HT_FAIL(ExitCode::kData, "{}: header is not valid JSON: {}", label, e.what());
  }
}

uint64_t offset_value(const nlohmann::json& v, const std::string& label, const std::string& name) {
  HT_REQUIRE(v.is_number_unsigned(), ExitCode::kData,
             "{}: tensor '{}': data_offsets must hold non-negative integers, got {}", label, name, v.dump());
  return v.get<uint64_t>();
}

std::vector<int64_t> parse_shape(const nlohmann::json& entry, const std::string& label, const std::string& name) {
  const auto it = entry.find("shape");
  HT_REQUIRE(it != entry.end() && it->is_array(), ExitCode::kData, "{}: tensor '{}': 'shape' missing or not an array",
             label, name);
  std::vector<int64_t> shape;
  shape.reserve(it->size());
  for (const auto& d : *it) {
    HT_REQUIRE(d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), ExitCode::kData,
               "{}: tensor '{}': shape entries must be non-negative integers below 2^63, got {}", label, name,
               d.dump());
    shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  return shape;
}

SafeTensorInfo parse_entry(const std::string& name, const nlohmann::json& entry, uint64_t data_bytes,
                           const std::string& label) {
  HT_REQUIRE(entry.is_object(), ExitCode::kData, "{}: tensor '{}': header entry is not a JSON object", label, name);
  SafeTensorInfo t;
  t.name = name;
  const auto dtype = entry.find("dtype");
  HT_REQUIRE(dtype != entry.end() && dtype->is_string(), ExitCode::kData,
             "{}: tensor '{}': 'dtype' missing or not a string", label, name);
  t.dtype = dtype->get<std::string>();
  const size_t elem_bytes = safetensors_dtype_bytes(t.dtype);
  HT_REQUIRE(elem_bytes > 0, ExitCode::kData, "{}: tensor '{}': unknown dtype '{}'", label, name, t.dtype);
  t.shape = parse_shape(entry, label, name);
  const auto offsets = entry.find("data_offsets");
  HT_REQUIRE(offsets != entry.end() && offsets->is_array() && offsets->size() == 2, ExitCode::kData,
             "{}: tensor '{}': 'data_offsets' missing or not a [begin, end] pair", label, name);
  t.begin = offset_value((*offsets)[0], label, name);
  t.end = offset_value((*offsets)[1], label, name);
  HT_REQUIRE(t.begin <= t.end, ExitCode::kData, "{}: tensor '{}': data_offsets [{}, {}] end before they begin",
             label, name, t.begin, t.end);
  HT_REQUIRE(t.end <= data_bytes, ExitCode::kData,
             "{}: tensor '{}': data_offsets [{}, {}] run past the data region ({} bytes)", label, name, t.begin,
             t.end, data_bytes);
  uint64_t span_bytes = 0;
  HT_REQUIRE(checked_span_bytes(t.shape, elem_bytes, span_bytes), ExitCode::kData,
             "{}: tensor '{}': shape {} times {} bytes per element overflows 64 bits", label, name,
             fmt::join(t.shape, "x"), elem_bytes);
  HT_REQUIRE(span_bytes == t.bytes(), ExitCode::kData,
             "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}", label, name,
             fmt::join(t.shape, "x"), t.dtype, span_bytes, t.begin, t.end, t.bytes());
  return t;
}

std::map<std::string, std::string> parse_metadata(const nlohmann::json& m, const std::string& label) {
  HT_REQUIRE(m.is_object(), ExitCode::kData, "{}: '{}' is not a JSON object", label, kMetadataKey);
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : m.items()) {
    HT_REQUIRE(v.is_string(), ExitCode::kData, "{}: {}['{}'] is not a string", label, kMetadataKey, k);
    out.emplace(k, v.get<std::string>());
  }
  return out;
}

// The format allows no gap, no overlap and no trailing bytes: sorted by offset, each tensor starts
// where the previous one ended and the last one ends at the end of the file.
void check_tiling(const std::vector<SafeTensorInfo>& tensors, uint64_t data_bytes, const std::string& label) {
  uint64_t expected = 0;
  const SafeTensorInfo* prev = nullptr;
  for (const auto& t : tensors) {
    HT_REQUIRE(t.begin >= expected, ExitCode::kData,
               "{}: tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))",
               label, t.name, t.begin, t.end, prev ? prev->name : "", prev ? prev->begin : 0, expected);
    HT_REQUIRE(t.begin == expected, ExitCode::kData, "{}: tensor '{}' starts at data byte {}, leaving a gap after byte {}",
               label, t.name, t.begin, expected);
    expected = t.end;
    prev = &t;
  }
  HT_REQUIRE(expected == data_bytes, ExitCode::kData,
             "{}: the tensors cover {} bytes of the {}-byte data region (trailing bytes)", label, expected, data_bytes);
}

// ---- writing -----------------------------------------------------------------------------------

void check_views(const std::string& path, const std::vector<SafeTensorView>& tensors) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    HT_REQUIRE(!t.name.empty() && t.name != kMetadataKey, ExitCode::kData, "{}: invalid tensor name '{}'", path, t.name);
    HT_REQUIRE(names.insert(t.name).second, ExitCode::kData, "{}: tensor '{}' given twice", path, t.name);
    const size_t elem_bytes = safetensors_dtype_bytes(t.dtype);
    HT_REQUIRE(elem_bytes > 0, ExitCode::kData, "{}: tensor '{}': unknown dtype '{}'", path, t.name, t.dtype);
    uint64_t span_bytes = 0;
    HT_REQUIRE(checked_span_bytes(t.shape, elem_bytes, span_bytes), ExitCode::kData,
               "{}: tensor '{}': shape {} has a negative dimension or overflows 64 bits", path, t.name,
               fmt::join(t.shape, "x"));
    HT_REQUIRE(span_bytes == t.bytes, ExitCode::kData, "{}: tensor '{}': shape {} of {} needs {} bytes, the view has {}",
               path, t.name, fmt::join(t.shape, "x"), t.dtype, span_bytes, t.bytes);
    HT_REQUIRE(t.data != nullptr || t.bytes == 0, ExitCode::kData, "{}: tensor '{}': null data", path, t.name);
  }
}

// The 8-byte length plus the space-padded JSON header.
std::string encode_header(const std::string& path, const std::vector<SafeTensorView>& tensors,
                          const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string json;
  try {
    json = h.dump();
  } catch (const nlohmann::json::exception& e) {  // names and metadata must be valid UTF-8
    HT_FAIL(ExitCode::kData, "{}: cannot encode the safetensors header: {}", path, e.what());
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(json.size()) >> (8 * i)) & 0xffu);
  return out + json;
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    HT_REQUIRE(n > 0, ExitCode::kData, "{}: write failed: {}", path, std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void fsync_dir(const std::string& file_path) {
  std::string dir = fs::parent_dir(file_path);
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HT_REQUIRE(fd >= 0, ExitCode::kData, "{}: cannot open its directory for fsync: {}", file_path, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  HT_REQUIRE(rc == 0, ExitCode::kData, "{}: fsync of its directory failed: {}", file_path, std::strerror(err));
}

}  // namespace

size_t safetensors_dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

uint64_t SafeTensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);  // validated at parse: cannot overflow
  return n;
}

SafeTensorsHeader parse_safetensors(const uint8_t* bytes, size_t size_bytes, const std::string& label) {
  HT_REQUIRE(size_bytes >= 8, ExitCode::kData, "{}: {} bytes is too short for a safetensors file (8-byte header length)",
             label, size_bytes);
  SafeTensorsHeader h;
  for (int i = 0; i < 8; ++i) h.header_bytes |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  HT_REQUIRE(h.header_bytes <= kSafeTensorsMaxHeaderBytes, ExitCode::kData,
             "{}: header length {} bytes exceeds the limit of {} bytes", label, h.header_bytes,
             kSafeTensorsMaxHeaderBytes);
  HT_REQUIRE(h.header_bytes <= size_bytes - 8, ExitCode::kData,
             "{}: header length {} bytes runs past the end of the {}-byte file (truncated?)", label, h.header_bytes,
             size_bytes);
  h.data_offset = 8 + h.header_bytes;
  const uint64_t data_bytes = size_bytes - h.data_offset;
  const nlohmann::json j = parse_header_json(bytes + 8, h.header_bytes, label);
  HT_REQUIRE(j.is_object(), ExitCode::kData, "{}: header is JSON but not an object", label);
  for (const auto& [name, entry] : j.items()) {
    if (name == kMetadataKey) {
      h.metadata = parse_metadata(entry, label);
      continue;
    }
    h.tensors.push_back(parse_entry(name, entry, data_bytes, label));
  }
  std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const SafeTensorInfo& a, const SafeTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_tiling(h.tensors, data_bytes, label);
  return h;
}

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HT_REQUIRE(fd >= 0, ExitCode::kData, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const int stat_errno = errno;
  if (!stat_ok || !S_ISREG(st.st_mode) || st.st_size < 8) {
    ::close(fd);
    HT_REQUIRE(stat_ok, ExitCode::kData, "{}: cannot stat: {}", path, std::strerror(stat_errno));
    HT_REQUIRE(S_ISREG(st.st_mode), ExitCode::kData, "{}: not a regular file", path);
    HT_FAIL(ExitCode::kData, "{}: {} bytes is too short for a safetensors file (8-byte header length)", path,
            st.st_size);
  }
  const auto size_bytes = static_cast<size_t>(st.st_size);
  void* addr = ::mmap(nullptr, size_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  HT_REQUIRE(addr != MAP_FAILED, ExitCode::kData, "{}: mmap of {} bytes failed: {}", path, size_bytes,
             std::strerror(map_errno));
  SafeTensorsFile f;
  f.path_ = path;
  f.storage_ = std::shared_ptr<const void>(addr, [size_bytes](const void* p) { ::munmap(const_cast<void*>(p), size_bytes); });
  f.base_ = static_cast<const uint8_t*>(addr);
  f.header_ = parse_safetensors(f.base_, size_bytes, path);
  return f;
}

SafeTensorsFile SafeTensorsFile::from_bytes(std::string bytes, const std::string& label) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  SafeTensorsFile f;
  f.path_ = label;
  f.base_ = reinterpret_cast<const uint8_t*>(owned->data());
  f.header_ = parse_safetensors(f.base_, owned->size(), label);
  f.storage_ = std::move(owned);
  return f;
}

SafeTensorsFile read_safetensors(const std::string& path) { return SafeTensorsFile::open(path); }

const SafeTensorInfo* SafeTensorsFile::find(const std::string& name) const {
  for (const auto& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const SafeTensorInfo& SafeTensorsFile::at(const std::string& name) const {
  const SafeTensorInfo* t = find(name);
  HT_REQUIRE(t != nullptr, ExitCode::kData, "{}: no tensor '{}' ({} tensors in the file)", path_, name,
             header_.tensors.size());
  return *t;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  check_views(path, tensors);
  const std::string header = encode_header(path, tensors, metadata);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HT_REQUIRE(fd >= 0, ExitCode::kData, "{}: cannot create {}: {}", path, tmp, std::strerror(errno));
  bool open_fd = true;
  try {
    write_all(fd, header.data(), header.size(), tmp);
    for (const auto& t : tensors) write_all(fd, t.data, t.bytes, tmp);
    HT_REQUIRE(::fsync(fd) == 0, ExitCode::kData, "{}: fsync failed: {}", tmp, std::strerror(errno));
    open_fd = false;  // close releases the descriptor even when it reports an error
    HT_REQUIRE(::close(fd) == 0, ExitCode::kData, "{}: close failed: {}", tmp, std::strerror(errno));
    HT_REQUIRE(::rename(tmp.c_str(), path.c_str()) == 0, ExitCode::kData, "{}: cannot rename {} to it: {}", path, tmp,
               std::strerror(errno));
  } catch (...) {
    if (open_fd) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(path);
}

}  // namespace ht::io
