// Small RAII wrappers over the HDF5 C API: files, groups, links, datasets, attributes.
// Every call is checked (HT_H5_CHECK, io/h5_check.h) and errors name the file and the object.
// Datasets written here are chunked with the Fletcher32 checksum filter.
// Only lib/io/ includes <hdf5.h> (tests/layering/layering.sh keeps it so): an identifier is an
// io::Id here (HDF5's hid_t, same type: h5.cpp checks it), to be passed to these functions and
// never to the HDF5 C API. Readers that read chunks without HDF5 find them with io/h5_chunks.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ht::io {

// An HDF5 identifier (hid_t) and an HDF5 size or dimension (hsize_t), without <hdf5.h>.
using Id = int64_t;
using Size = unsigned long long;
inline constexpr Id kInvalidId = -1;  // H5I_INVALID_HID

// Owns one Id and closes it with the matching H5xclose.
class Handle {
 public:
  Handle() = default;
  Handle(Id id, int (*close)(Id)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = kInvalidId; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) { reset(); id_ = o.id_; close_ = o.close_; o.id_ = kInvalidId; }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Id id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Gives up ownership: the caller closes the id.
  Id release() {
    const Id id = id_;
    id_ = kInvalidId;
    return id;
  }

 private:
  Id id_ = kInvalidId;
  int (*close_)(Id) = nullptr;
};

// Element types we store, with their HDF5 native types.
template <typename T> Id native_type();

// The on-disk format of a new file. kV110: HDF5 1.10's, whose object headers, B-trees and heaps
// carry checksums too, not only the chunks (checkpoints).
enum class FileFormat { kDefault, kV110 };

class File {
 public:
  // Creates (truncates) a file for writing from one process. `what` names the file in the error
  // message ("<path>: cannot create <what> (...)").
  static File create(const std::string& path, FileFormat format = FileFormat::kDefault,
                     const std::string& what = "HDF5 file");
  // Opens read-only. Fails with a one-line message if missing or not HDF5.
  static File open_read(const std::string& path);
  static File open_rw(const std::string& path);
  Id id() const { return h_.id(); }
  const std::string& path() const { return path_; }
  void flush();
  void close() { h_.reset(); }
  // Flushes and closes, writing out HDF5's caches: where a full disk usually shows up. False when
  // either step failed (the file is closed anyway); never throws.
  bool flush_and_close() noexcept;

 private:
  File(Handle h, std::string path) : h_(std::move(h)), path_(std::move(path)) {}
  static File open_mode(const std::string& path, unsigned flags);
  Handle h_;
  std::string path_;
};

bool exists(Id loc, const std::string& name);  // link exists (intermediate groups too)
Handle create_group(Id loc, const std::string& name);  // creates intermediate groups
Handle open_group(Id loc, const std::string& name);
std::vector<std::string> list_children(Id loc, const std::string& group = ".");

// The links of a group, in name order, with their kind: a hard link names an object of this file;
// a soft or external one may point anywhere (into another file too).
enum class LinkType { kHard, kSoft, kExternal, kUserDefined };
struct Link {
  std::string name;
  LinkType type = LinkType::kHard;
};
std::vector<Link> list_links(Id loc, const std::string& group);

// Writes a dataset of dims with Fletcher32 + chunking (chunk_elems along the first dim; 0 = auto).
void write_raw(Id loc, const std::string& name, Id type, const void* data, const std::vector<Size>& dims,
               Size chunk_rows = 0);
template <typename T>
void write(Id loc, const std::string& name, const std::vector<T>& data, std::vector<Size> dims = {},
           Size chunk_rows = 0) {
  if (dims.empty()) dims = {static_cast<Size>(data.size())};
  write_raw(loc, name, native_type<T>(), data.data(), dims, chunk_rows);
}
// A scalar fixed-length string dataset (no 64 KiB attribute limit; not chunked, so no checksum).
void write_string(Id loc, const std::string& name, const std::string& text);
// A fixed-length string in a 1-element chunked dataset: unlike write_string's scalar dataset this
// one carries a Fletcher32 checksum. Readable with read_string.
void write_checked_string(Id loc, const std::string& name, const std::string& text);

// The class of a dataset's element type (HDF5's H5T_class_t, for the classes our formats use).
enum class TypeClass { kNone, kInteger, kFloat, kString, kCompound, kOther };

struct DatasetInfo {
  std::vector<Size> dims;
  TypeClass type_class = TypeClass::kNone;
  size_t type_size = 0;
  bool is_signed = false;
  bool has_fletcher32 = false;
};
DatasetInfo info(Id loc, const std::string& name);
// Throws kData naming the file and the dataset unless it is a plain integer dataset: 1, 2, 4 or 8
// bytes, little-endian, every bit used (precision = 8 x size, offset 0, zero padding). Readers
// that decode the stored bytes themselves need this: a damaged datatype message with another
// precision or offset would make HDF5 read other values than the bytes say.
void require_plain_integer(Id loc, const std::string& name, const DatasetInfo& info);

// Throws kData naming the file and the dataset when the dataset declares more bytes than the whole
// file holds (the formats here store every element: no compression, no unwritten chunks). Run
// before allocating for a read, so that a damaged header cannot ask for terabytes.
void require_within_file(Id loc, const std::string& name, const DatasetInfo& info);

// Reads a whole dataset converted to T.
template <typename T>
std::vector<T> read(Id loc, const std::string& name);
void read_raw(Id loc, const std::string& name, Id mem_type, void* out);
// Reads rows [start, start + count) along the first dimension into out (row-major, converted to T).
template <typename T>
void read_rows(Id dataset, Size start, Size count, T* out);
std::string read_string(Id loc, const std::string& name);

void set_attr(Id loc, const std::string& name, const std::string& value);
void set_attr(Id loc, const std::string& name, int64_t value);
void set_attr(Id loc, const std::string& name, double value);
void set_attr(Id loc, const std::string& name, const std::vector<std::string>& values);
bool has_attr(Id loc, const std::string& name);
std::string attr_string(Id loc, const std::string& name);
int64_t attr_int(Id loc, const std::string& name);
double attr_double(Id loc, const std::string& name);
std::vector<std::string> attr_strings(Id loc, const std::string& name);

// Opens a dataset of this file: one reached through an external link (it lives in another file) is
// refused with kData naming both files, as is a missing or damaged one.
Handle open_dataset(Id loc, const std::string& name);

// What an object is, how many hard links name it, and which open file holds it (the same fileno =
// the same file). name is relative to loc ("." = loc itself). Throws kData when it cannot be read.
enum class ObjectType { kUnknown, kGroup, kDataset, kOther };
struct ObjectInfo {
  ObjectType type = ObjectType::kUnknown;
  unsigned names = 0;         // hard links to the object (its reference count)
  unsigned long fileno = 0;
};
ObjectInfo object_info(Id loc, const std::string& name);

// The name of the file an HDF5 location belongs to, for messages ("?" when unknown).
std::string file_name(Id loc);
// The path of an object inside its file ("/train/tokens"; "?" when unknown), for messages.
std::string object_name(Id id);
// Throws ht::Error(kData) for a failed H5Dread of dataset `name` (found from loc): "<file>: dataset
// '<name>'<part>: read failed (checksum mismatch or damaged data ...)". part: "" or " rows [a, b)".
[[noreturn]] void fail_read(Id loc, const std::string& name, const std::string& part);

// Silences HDF5's automatic error stack printing for this process (our messages replace it).
void quiet_hdf5_errors();

}  // namespace ht::io
