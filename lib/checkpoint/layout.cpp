#include "checkpoint/layout.h"

#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "core/error.h"
#include "io/h5.h"

namespace ht::checkpoint::detail {
namespace {

// --- dtypes -----------------------------------------------------------------------------------

// The HDF5 type a tensor of this dtype is stored as; bf16/f16 are widened to float32 and bool
// narrowed to uint8 (both lossless), with the original dtype kept in the `torch_dtype` attribute.
torch::ScalarType storage_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16: case torch::kHalf: return torch::kFloat32;
    case torch::kBool: return torch::kUInt8;
    default: return t;
  }
}

io::Id h5_type(torch::ScalarType t, const std::string& key) {
  switch (t) {
    case torch::kFloat32: return io::native_type<float>();
    case torch::kFloat64: return io::native_type<double>();
    case torch::kInt64: return io::native_type<int64_t>();
    case torch::kInt32: return io::native_type<int32_t>();
    case torch::kInt16: return io::native_type<int16_t>();
    case torch::kInt8: return io::native_type<int8_t>();
    case torch::kUInt8: return io::native_type<uint8_t>();
    default: HT_FAIL(ExitCode::kData, "tensor '{}': dtype {} cannot be stored in a checkpoint", key, c10::toString(t));
  }
}

torch::ScalarType dtype_of(const io::DatasetInfo& i, const std::string& key) {
  if (i.type_class == io::TypeClass::kFloat && i.type_size == 4) return torch::kFloat32;
  if (i.type_class == io::TypeClass::kFloat && i.type_size == 8) return torch::kFloat64;
  if (i.type_class == io::TypeClass::kInteger && i.is_signed) {
    switch (i.type_size) {
      case 8: return torch::kInt64;
      case 4: return torch::kInt32;
      case 2: return torch::kInt16;
      case 1: return torch::kInt8;
    }
  }
  if (i.type_class == io::TypeClass::kInteger && !i.is_signed && i.type_size == 1) return torch::kUInt8;
  HT_FAIL(ExitCode::kData, "dataset '{}' has an element type a checkpoint never holds", key);
}

torch::ScalarType dtype_from_name(const std::string& name, const std::string& key) {
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kHalf;
  if (name == "bool") return torch::kBool;
  HT_FAIL(ExitCode::kData, "dataset '{}': unknown torch_dtype '{}'", key, name);
}

// --- writing ----------------------------------------------------------------------------------

void write_tensor(io::Id file, const std::string& key, const torch::Tensor& tensor) {
  HT_REQUIRE(tensor.defined(), ExitCode::kData, "tensor '{}' is undefined", key);
  const torch::ScalarType original = tensor.scalar_type();
  torch::Tensor t = tensor.detach().to(torch::kCPU).to(storage_dtype(original)).contiguous();
  std::vector<io::Size> dims;
  for (int64_t d : t.sizes()) dims.push_back(static_cast<io::Size>(d));
  const bool scalar = dims.empty();
  if (scalar) dims = {1};  // chunked (and so checksummed) datasets need at least one dimension
  io::write_raw(file, key, h5_type(t.scalar_type(), key), t.data_ptr(), dims);
  if (scalar || original != t.scalar_type()) {
    io::Handle ds = io::open_dataset(file, key);
    if (scalar) io::set_attr(ds.id(), "scalar", int64_t{1});
    if (original == torch::kBFloat16) io::set_attr(ds.id(), "torch_dtype", std::string("bfloat16"));
    if (original == torch::kHalf) io::set_attr(ds.id(), "torch_dtype", std::string("float16"));
    if (original == torch::kBool) io::set_attr(ds.id(), "torch_dtype", std::string("bool"));
  }
}

void check_key(const std::string& key, bool allow_reserved) {
  HT_REQUIRE(!key.empty() && key.front() != '/' && key.back() != '/' && key.find("//") == std::string::npos,
             ExitCode::kData, "checkpoint key '{}' is not a relative HDF5 path", key);
  const bool reserved = key == "state" || key == "rank" || key.rfind("state/", 0) == 0 || key.rfind("rank/", 0) == 0;
  HT_REQUIRE(allow_reserved || !reserved, ExitCode::kData,
             "checkpoint key '{}' collides with the reserved groups /state and /rank", key);
}

std::string iso8601_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_root_attrs(io::Id file, int64_t step, int64_t world_size, const std::string& run_id,
                      double train_seconds) {
  io::set_attr(file, "format", std::string(kFormatName));
  if (!run_id.empty()) io::set_attr(file, "run_id", run_id);
  io::set_attr(file, "format_version", kFormatVersion);
  io::set_attr(file, "hpctrain_version", std::string(HPCTRAIN_VERSION));
  io::set_attr(file, "torch_version", std::string(TORCH_VERSION));
  io::set_attr(file, "world_size", world_size);
  io::set_attr(file, "time", iso8601_now());
  io::set_attr(file, "step", step);
  io::set_attr(file, "train_seconds", train_seconds);
}

void slow_save_hook(io::File& file) {
  const char* ms = std::getenv("HPCTRAIN_TEST_SLOW_SAVE_MS");
  if (!ms || std::atol(ms) <= 0) return;
  file.flush();  // a half-written file on disk, as a crash would leave it
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(ms)));
}

// Runs one write and re-throws any failure with the file and key named.
template <typename F>
void keyed(const std::string& path, const std::string& key, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    HT_FAIL(ExitCode::kData, "{}: writing '{}' failed: {}", path, key, e.what());
  }
}

// (Loops without structured bindings: C++17 lambdas cannot capture those; clang refuses it.)
void write_body(io::File& file, const std::string& path, const Snapshot& s, const std::vector<TensorMap>& per_rank) {
  for (const auto& kv : s.strings) {
    const std::string& k = kv.first;
    const auto& v = kv.second;
    check_key(k, false);
    HT_REQUIRE(!s.tensors.count(k), ExitCode::kData, "checkpoint key '{}' is both a string and a tensor", k);
    keyed(path, k, [&] { io::write_checked_string(file.id(), k, v); });
  }
  for (const auto& kv : s.ints) {
    const std::string& k = kv.first;
    const auto& v = kv.second;
    check_key(k, true);
    keyed(path, "state/" + k, [&] { io::write<int64_t>(file.id(), "state/" + k, {v}); });
  }
  for (const auto& kv : s.reals) {
    const std::string& k = kv.first;
    const auto& v = kv.second;
    HT_REQUIRE(!s.ints.count(k), ExitCode::kData, "checkpoint key '{}' is both an int and a real", k);
    keyed(path, "state/" + k, [&] { io::write<double>(file.id(), "state/" + k, {v}); });
  }
  size_t written = 0;
  for (const auto& kv : s.tensors) {
    const std::string& k = kv.first;
    const auto& v = kv.second;
    check_key(k, false);
    keyed(path, k, [&] { write_tensor(file.id(), k, v); });
    if (++written == s.tensors.size() / 2) slow_save_hook(file);
  }
  if (s.tensors.size() < 2) slow_save_hook(file);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const std::string group = "rank/" + std::to_string(r);
    keyed(path, group, [&] { io::create_group(file.id(), group); });
    for (const auto& kv : per_rank[r]) {
      const std::string& k = kv.first;
      const auto& v = kv.second;
      check_key(k, true);
      keyed(path, group + "/" + k, [&] { write_tensor(file.id(), group + "/" + k, v); });
    }
  }
}

}  // namespace

void write_file(const std::string& path, const Snapshot& shared, const std::vector<TensorMap>& per_rank,
                int64_t step, int64_t world_size) {
  HT_REQUIRE(static_cast<int64_t>(per_rank.size()) == world_size, ExitCode::kData,
             "{}: {} per-rank entries for a world of {}", path, per_rank.size(), world_size);
  // The 1.10 format: object headers, B-trees and heaps carry checksums too, not only the chunks.
  io::File file = io::File::create(path, io::FileFormat::kV110, "the checkpoint file");
  keyed(path, "root attributes", [&] { write_root_attrs(file.id(), step, world_size, shared.run_id, shared.train_seconds); });
  write_body(file, path, shared, per_rank);  // on failure the file is closed as `file` goes
  HT_REQUIRE(file.flush_and_close(), ExitCode::kData,
             "{}: flushing the checkpoint file failed (disk full or file size limit?)", path);
}

namespace {

// --- reading ----------------------------------------------------------------------------------

const char* link_kind(io::LinkType t) {
  switch (t) {
    case io::LinkType::kSoft: return "a soft";
    case io::LinkType::kExternal: return "an external";
    default: return "a user-defined";
  }
}

// Every dataset below `group`, as paths relative to the root ("model/wte.weight"). A checkpoint
// holds plain groups and datasets, each under exactly one name. Anything else is a fault found
// before it is followed: a soft or external link (it may point anywhere, into another file too),
// an object with a second name (the only way to build a cycle, which a walk by path would follow
// forever), a committed datatype.
void collect_datasets(io::Id file, const std::string& group, std::vector<std::string>& out) {
  for (const io::Link& link : io::list_links(file, group)) {
    const std::string path = group == "." ? link.name : group + "/" + link.name;
    HT_REQUIRE(link.type == io::LinkType::kHard, ExitCode::kData,
               "'{}' is {} link; a checkpoint holds only groups and datasets", path, link_kind(link.type));
    const io::ObjectInfo info = io::object_info(file, path);
    HT_REQUIRE(info.names == 1, ExitCode::kData,
               "object '{}' has {} names (hard links); each object of a checkpoint has one", path, info.names);
    if (info.type == io::ObjectType::kGroup) collect_datasets(file, path, out);
    else if (info.type == io::ObjectType::kDataset) out.push_back(path);
    else HT_FAIL(ExitCode::kData, "object '{}' is neither a group nor a dataset", path);
  }
}

torch::Tensor read_tensor(io::Id file, const std::string& key, int64_t& bytes) {
  const io::DatasetInfo inf = io::info(file, key);
  const torch::ScalarType st = dtype_of(inf, key);
  io::require_within_file(file, key, inf);
  std::vector<int64_t> shape(inf.dims.begin(), inf.dims.end());
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(st));
  if (t.numel() > 0) {
    HT_REQUIRE(inf.has_fletcher32, ExitCode::kData, "dataset '{}' has no Fletcher32 checksum", key);
    io::read_raw(file, key, h5_type(st, key), t.data_ptr());
  }
  bytes += static_cast<int64_t>(t.nbytes());
  io::Handle ds = io::open_dataset(file, key);
  if (io::has_attr(ds.id(), "torch_dtype")) t = t.to(dtype_from_name(io::attr_string(ds.id(), "torch_dtype"), key));
  if (io::has_attr(ds.id(), "scalar") && io::attr_int(ds.id(), "scalar") == 1) {
    HT_REQUIRE(t.numel() == 1, ExitCode::kData, "dataset '{}' is marked scalar but has {} elements", key, t.numel());
    t = t.reshape({});
  }
  return t;
}

std::string read_text(io::Id file, const std::string& key, int64_t& bytes) {
  const io::DatasetInfo inf = io::info(file, key);
  HT_REQUIRE(inf.has_fletcher32, ExitCode::kData, "string dataset '{}' has no Fletcher32 checksum", key);
  std::string text = io::read_string(file, key);
  bytes += static_cast<int64_t>(inf.type_size);
  return text;
}

void read_state_value(io::Id file, const std::string& path, FileContents& c, int64_t& bytes) {
  const std::string key = path.substr(6);  // after "state/"
  const io::DatasetInfo inf = io::info(file, path);
  HT_REQUIRE(inf.dims.size() == 1 && inf.dims[0] == 1 && inf.has_fletcher32, ExitCode::kData,
             "state value '{}' is not a checksummed 1-element dataset", path);
  if (inf.type_class == io::TypeClass::kInteger) c.shared.ints[key] = io::read<int64_t>(file, path).at(0);
  else if (inf.type_class == io::TypeClass::kFloat) c.shared.reals[key] = io::read<double>(file, path).at(0);
  else HT_FAIL(ExitCode::kData, "state value '{}' is neither an integer nor a float", path);
  bytes += 8;
}

void read_one(io::Id file, const std::string& path, FileContents& c, int64_t& bytes) {
  if (path.rfind("state/", 0) == 0) return read_state_value(file, path, c, bytes);
  if (path.rfind("rank/", 0) == 0) {
    const size_t slash = path.find('/', 5);
    HT_REQUIRE(slash != std::string::npos, ExitCode::kData, "dataset '{}' is not inside a rank group", path);
    const std::string rank_text = path.substr(5, slash - 5);
    HT_REQUIRE(!rank_text.empty() && rank_text.size() <= 9 &&
                   rank_text.find_first_not_of("0123456789") == std::string::npos &&
                   std::to_string(std::stoll(rank_text)) == rank_text &&
                   std::stoll(rank_text) < static_cast<int64_t>(c.per_rank.size()),
               ExitCode::kData, "'{}' belongs to no rank of a world of {}", path, c.per_rank.size());
    c.per_rank[std::stoul(rank_text)][path.substr(slash + 1)] = read_tensor(file, path, bytes);
    return;
  }
  if (io::info(file, path).type_class == io::TypeClass::kString) c.shared.strings[path] = read_text(file, path, bytes);
  else c.shared.tensors[path] = read_tensor(file, path, bytes);
}

void read_root(io::Id file, FileContents& c) {
  const std::string format = io::attr_string(file, "format");
  HT_REQUIRE(format == kFormatName, ExitCode::kData, "root attribute format is '{}', expected '{}'", format,
             kFormatName);
  const int64_t version = io::attr_int(file, "format_version");
  HT_REQUIRE(version == kFormatVersion, ExitCode::kData,
             "format_version {} is not supported by this build (it reads version {})", version, kFormatVersion);
  c.shared.world_size = io::attr_int(file, "world_size");
  HT_REQUIRE(c.shared.world_size >= 1 && c.shared.world_size < (1 << 24), ExitCode::kData,
             "root attribute world_size = {} is invalid", c.shared.world_size);
  c.shared.step = io::attr_int(file, "step");
  if (io::has_attr(file, "run_id")) c.shared.run_id = io::attr_string(file, "run_id");
  if (io::has_attr(file, "train_seconds")) {
    c.shared.train_seconds = io::attr_double(file, "train_seconds");
    HT_REQUIRE(std::isfinite(c.shared.train_seconds) && c.shared.train_seconds >= 0, ExitCode::kData,
               "root attribute train_seconds = {} is invalid", c.shared.train_seconds);
    c.provenance["train_seconds"] = fmt::format("{:.3f}", c.shared.train_seconds);
  }
  c.per_rank.assign(static_cast<size_t>(c.shared.world_size), {});
  for (const char* k : {"format", "hpctrain_version", "torch_version", "time"})
    c.provenance[k] = io::has_attr(file, k) ? io::attr_string(file, k) : "?";
  c.provenance["format_version"] = std::to_string(version);
  c.provenance["world_size"] = std::to_string(c.shared.world_size);
  c.provenance["step"] = std::to_string(c.shared.step);
  for (int64_t r = 0; r < c.shared.world_size; ++r)
    HT_REQUIRE(io::exists(file, "rank/" + std::to_string(r)), ExitCode::kData, "group /rank/{} is missing", r);
}

}  // namespace

Scan scan_file(const std::string& path, bool stop_at_first) {
  Scan out;
  io::File f = io::File::open_read(path);
  out.contents.shared.path = path;
  try {
    read_root(f.id(), out.contents);
  } catch (const std::exception& e) {
    out.faults.push_back(e.what());
    return out;  // without the root attributes nothing else can be trusted
  }
  std::vector<std::string> names;
  try {
    collect_datasets(f.id(), ".", names);
  } catch (const std::exception& e) {
    out.faults.push_back(fmt::format("listing the file's objects failed: {}", e.what()));
    if (stop_at_first) return out;
  }
  for (const auto& name : names) {
    try {
      read_one(f.id(), name, out.contents, out.bytes);
      ++out.datasets;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      out.faults.push_back(what.find(name) != std::string::npos ? what : fmt::format("'{}': {}", name, what));
      if (stop_at_first) return out;
    }
  }
  return out;
}

FileContents read_contents(const std::string& path) {
  Scan s = scan_file(path, true);
  HT_REQUIRE(s.faults.empty(), ExitCode::kData, "{}: {}", path, s.faults.front());
  return std::move(s.contents);
}

std::string run_id_of(const std::string& path) {
  try {
    io::File f = io::File::open_read(path);
    return io::has_attr(f.id(), "run_id") ? io::attr_string(f.id(), "run_id") : "";
  } catch (const Error&) {
    return "";  // unreadable: nobody's, so never rotated away
  }
}

}  // namespace ht::checkpoint::detail

namespace ht::checkpoint {

std::string read_config_text(const std::string& path) {
  io::File f = io::File::open_read(path);
  HT_REQUIRE(io::has_attr(f.id(), "format") && io::attr_string(f.id(), "format") == kFormatName, ExitCode::kData,
             "{}: not an hpctrain checkpoint (its root attribute 'format' is not '{}'; a dataset or another file?)",
             path, kFormatName);
  HT_REQUIRE(io::exists(f.id(), "/config"), ExitCode::kData, "{}: the checkpoint holds no /config", path);
  return io::read_string(f.id(), "/config");
}

bool is_checkpoint_file(const std::string& path) {
  io::File f = io::File::open_read(path);
  return io::has_attr(f.id(), "format") && io::attr_string(f.id(), "format") == kFormatName;
}

}  // namespace ht::checkpoint
