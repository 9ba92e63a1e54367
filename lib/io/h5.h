// Small RAII wrappers over the HDF5 C API: files, groups, datasets, attributes.
// Every call is checked (HT_H5_CHECK) and errors name the file and the object.
// Datasets written here are chunked with the Fletcher32 checksum filter.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ht::io {

// Owns one hid_t and closes it with the matching H5xclose.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) { reset(); id_ = o.id_; close_ = o.close_; o.id_ = H5I_INVALID_HID; }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

// Element types we store, with their HDF5 native types.
template <typename T> hid_t native_type();

class File {
 public:
  // Creates (truncates) a file for writing from one process.
  static File create(const std::string& path);
  // Opens read-only. Fails with a one-line message if missing or not HDF5.
  static File open_read(const std::string& path);
  static File open_rw(const std::string& path);
  hid_t id() const { return h_.id(); }
  const std::string& path() const { return path_; }
  void flush();
  void close() { h_.reset(); }

 private:
  File(Handle h, std::string path) : h_(std::move(h)), path_(std::move(path)) {}
  static File open_mode(const std::string& path, unsigned flags);
  Handle h_;
  std::string path_;
};

bool exists(hid_t loc, const std::string& name);  // link exists (intermediate groups too)
Handle create_group(hid_t loc, const std::string& name);  // creates intermediate groups
Handle open_group(hid_t loc, const std::string& name);
std::vector<std::string> list_children(hid_t loc, const std::string& group = ".");

// Writes a dataset of dims with Fletcher32 + chunking (chunk_elems along the first dim; 0 = auto).
void write_raw(hid_t loc, const std::string& name, hid_t type, const void* data, const std::vector<hsize_t>& dims,
               hsize_t chunk_rows = 0);
template <typename T>
void write(hid_t loc, const std::string& name, const std::vector<T>& data, std::vector<hsize_t> dims = {},
           hsize_t chunk_rows = 0) {
  if (dims.empty()) dims = {static_cast<hsize_t>(data.size())};
  write_raw(loc, name, native_type<T>(), data.data(), dims, chunk_rows);
}
void write_string(hid_t loc, const std::string& name, const std::string& text);

struct DatasetInfo {
  std::vector<hsize_t> dims;
  H5T_class_t type_class = H5T_NO_CLASS;
  size_t type_size = 0;
  bool is_signed = false;
  bool has_fletcher32 = false;
};
DatasetInfo info(hid_t loc, const std::string& name);
// Throws kData naming the file and the dataset unless it is a plain integer dataset: 1, 2, 4 or 8
// bytes, little-endian, every bit used (precision = 8 x size, offset 0, zero padding). Readers
// that decode the stored bytes themselves need this: a damaged datatype message with another
// precision or offset would make HDF5 read other values than the bytes say.
void require_plain_integer(hid_t loc, const std::string& name, const DatasetInfo& info);

// Throws kData naming the file and the dataset when the dataset declares more bytes than the whole
// file holds (the formats here store every element: no compression, no unwritten chunks). Run
// before allocating for a read, so that a damaged header cannot ask for terabytes.
void require_within_file(hid_t loc, const std::string& name, const DatasetInfo& info);

// Reads a whole dataset converted to T.
template <typename T>
std::vector<T> read(hid_t loc, const std::string& name);
void read_raw(hid_t loc, const std::string& name, hid_t mem_type, void* out);
// Reads rows [start, start + count) along the first dimension into out (row-major, converted to T).
template <typename T>
void read_rows(hid_t dataset, hsize_t start, hsize_t count, T* out);
std::string read_string(hid_t loc, const std::string& name);

void set_attr(hid_t loc, const std::string& name, const std::string& value);
void set_attr(hid_t loc, const std::string& name, int64_t value);
void set_attr(hid_t loc, const std::string& name, double value);
void set_attr(hid_t loc, const std::string& name, const std::vector<std::string>& values);
bool has_attr(hid_t loc, const std::string& name);
std::string attr_string(hid_t loc, const std::string& name);
int64_t attr_int(hid_t loc, const std::string& name);
double attr_double(hid_t loc, const std::string& name);
std::vector<std::string> attr_strings(hid_t loc, const std::string& name);

// Opens a dataset of this file: one reached through an external link (it lives in another file) is
// refused with kData naming both files, as is a missing or damaged one.
Handle open_dataset(hid_t loc, const std::string& name);

// What an object is, how many hard links name it, and which open file holds it (the same fileno =
// the same file). name is relative to loc ("." = loc itself). Throws kData when it cannot be read.
struct ObjectInfo {
  H5O_type_t type = H5O_TYPE_UNKNOWN;
  unsigned names = 0;         // hard links to the object (its reference count)
  unsigned long fileno = 0;
};
ObjectInfo object_info(hid_t loc, const std::string& name);

// The name of the file an HDF5 location belongs to, for messages ("?" when unknown).
std::string file_name(hid_t loc);
// The path of an object inside its file ("/train/tokens"; "?" when unknown), for messages.
std::string object_name(hid_t id);
// Throws ht::Error(kData) for a failed H5Dread of dataset `name` (found from loc): "<file>: dataset
// '<name>'<part>: read failed (checksum mismatch or damaged data ...)". part: "" or " rows [a, b)".
[[noreturn]] void fail_read(hid_t loc, const std::string& name, const std::string& part);

// Silences HDF5's automatic error stack printing for this process (our messages replace it).
void quiet_hdf5_errors();

}  // namespace ht::io
