// Files, groups, links and datasets (attributes: h5_attr.cpp; chunk locations: h5_chunks.cpp).
#include "io/h5.h"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <type_traits>

#include "core/error.h"
#include "io/h5_check.h"
#include "io/h5_internal.h"

namespace ht::io {

// io::Id and io::Size stand for HDF5's types in io/h5.h, which does not include <hdf5.h>.
static_assert(std::is_same_v<Id, hid_t>, "io::Id must be HDF5's hid_t");
static_assert(std::is_same_v<Size, hsize_t>, "io::Size must be HDF5's hsize_t");
static_assert(std::is_same_v<int (*)(Id), herr_t (*)(hid_t)>, "Handle's close function must be an H5xclose");
static_assert(kInvalidId == H5I_INVALID_HID, "io::kInvalidId must be H5I_INVALID_HID");

void Handle::reset() {
  if (id_ >= 0 && close_) close_(id_);
  id_ = kInvalidId;
}

template <> hid_t native_type<float>() { return H5T_NATIVE_FLOAT; }
template <> hid_t native_type<double>() { return H5T_NATIVE_DOUBLE; }
template <> hid_t native_type<int8_t>() { return H5T_NATIVE_INT8; }
template <> hid_t native_type<int16_t>() { return H5T_NATIVE_INT16; }
template <> hid_t native_type<uint8_t>() { return H5T_NATIVE_UINT8; }
template <> hid_t native_type<uint16_t>() { return H5T_NATIVE_UINT16; }
template <> hid_t native_type<int32_t>() { return H5T_NATIVE_INT32; }
template <> hid_t native_type<uint32_t>() { return H5T_NATIVE_UINT32; }
template <> hid_t native_type<int64_t>() { return H5T_NATIVE_INT64; }
template <> hid_t native_type<uint64_t>() { return H5T_NATIVE_UINT64; }

void quiet_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string file_name(hid_t loc) {
  const ssize_t n = H5Fget_name(loc, nullptr, 0);
  if (n <= 0) return "?";
  std::string name(static_cast<size_t>(n) + 1, '\0');
  H5Fget_name(loc, name.data(), name.size());
  name.resize(static_cast<size_t>(n));
  return name;
}

std::string object_name(hid_t id) {
  const ssize_t n = H5Iget_name(id, nullptr, 0);
  if (n <= 0) return "?";
  std::string name(static_cast<size_t>(n) + 1, '\0');
  H5Iget_name(id, name.data(), name.size());
  name.resize(static_cast<size_t>(n));
  return name;
}

void fail_read(hid_t loc, const std::string& name, const std::string& part) {
  H5Eclear2(H5E_DEFAULT);
  HT_FAIL(ExitCode::kData, "{}: dataset '{}'{}: read failed (checksum mismatch or damaged data)",
          file_name(loc), name, part);
}

namespace detail {
hssize_t element_count(hid_t space) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  return n < 0 ? -1 : n;
}

TypeClass type_class(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return TypeClass::kInteger;
    case H5T_FLOAT: return TypeClass::kFloat;
    case H5T_STRING: return TypeClass::kString;
    case H5T_COMPOUND: return TypeClass::kCompound;
    case H5T_NO_CLASS: return TypeClass::kNone;
    default: return TypeClass::kOther;
  }
}

Handle fixed_string_type(size_t bytes) {
  Handle type(HT_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  HT_H5_CHECK(H5Tset_size(type.id(), std::max<size_t>(1, bytes)));
  HT_H5_CHECK(H5Tset_strpad(type.id(), H5T_STR_NULLPAD));
  return type;
}
}  // namespace detail

using detail::element_count;

File File::create(const std::string& path, FileFormat format, const std::string& what) {
  quiet_hdf5_errors();
  Handle fapl(HT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  if (format == FileFormat::kV110) HT_H5_CHECK(H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_V110, H5F_LIBVER_V110));
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  HT_REQUIRE(id >= 0, ExitCode::kData, "{}: cannot create {} (directory missing or not writable?)", path, what);
  return File(Handle(id, H5Fclose), path);
}

bool File::flush_and_close() noexcept {
  if (!h_.valid()) return false;
  const hid_t id = h_.release();  // closed below, also when the flush fails
  const bool flushed = H5Fflush(id, H5F_SCOPE_GLOBAL) >= 0;
  const bool closed = H5Fclose(id) >= 0;
  return flushed && closed;
}

File File::open_mode(const std::string& path, unsigned flags) {
  quiet_hdf5_errors();
  struct stat st {};
  HT_REQUIRE(::stat(path.c_str(), &st) == 0, ExitCode::kData, "{}: file not found", path);
  HT_REQUIRE(S_ISREG(st.st_mode), ExitCode::kData, "{}: not a regular file", path);
  hid_t id = H5Fopen(path.c_str(), flags, H5P_DEFAULT);
  if (id < 0) {  // only now look closer (H5Fis_hdf5 opens the file once more): which message fits
    HT_REQUIRE(H5Fis_hdf5(path.c_str()) > 0, ExitCode::kData, "{}: not an HDF5 file (or truncated)", path);
    HT_FAIL(ExitCode::kData, "{}: cannot open HDF5 file (truncated or damaged)", path);
  }
  return File(Handle(id, H5Fclose), path);
}

File File::open_read(const std::string& path) { return open_mode(path, H5F_ACC_RDONLY); }
File File::open_rw(const std::string& path) { return open_mode(path, H5F_ACC_RDWR); }
void File::flush() { HT_H5_CHECK(H5Fflush(h_.id(), H5F_SCOPE_GLOBAL)); }

bool exists(hid_t loc, const std::string& name) {
  // Walk the path so that a missing intermediate group is "false", not an error.
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    const size_t next = name.find('/', pos);
    prefix = name.substr(0, next);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    pos = next == std::string::npos ? next : next + 1;
  }
  return true;
}

Handle create_group(hid_t loc, const std::string& name) {
  Handle lcpl(HT_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose);
  HT_H5_CHECK(H5Pset_create_intermediate_group(lcpl.id(), 1));
  return Handle(HT_H5_CHECK(H5Gcreate2(loc, name.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
}

Handle open_group(hid_t loc, const std::string& name) {
  HT_REQUIRE(exists(loc, name), ExitCode::kData, "group '{}' is missing", name);
  return Handle(HT_H5_CHECK(H5Gopen2(loc, name.c_str(), H5P_DEFAULT)), H5Gclose);
}

std::vector<std::string> list_children(hid_t loc, const std::string& group) {
  std::vector<std::string> names;
  auto cb = [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  };
  Handle g(HT_H5_CHECK(H5Gopen2(loc, group.c_str(), H5P_DEFAULT)), H5Gclose);
  HT_H5_CHECK(H5Literate(g.id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, cb, &names));
  return names;
}

std::vector<Link> list_links(hid_t loc, const std::string& group) {
  std::vector<Link> links;
  auto cb = [](hid_t, const char* name, const H5L_info_t* info, void* out) -> herr_t {
    const LinkType type = info->type == H5L_TYPE_HARD       ? LinkType::kHard
                          : info->type == H5L_TYPE_SOFT     ? LinkType::kSoft
                          : info->type == H5L_TYPE_EXTERNAL ? LinkType::kExternal
                                                            : LinkType::kUserDefined;
    static_cast<std::vector<Link>*>(out)->push_back(Link{name, type});
    return 0;
  };
  Handle g(HT_H5_CHECK(H5Gopen2(loc, group.c_str(), H5P_DEFAULT)), H5Gclose);
  HT_H5_CHECK(H5Literate(g.id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, cb, &links));
  return links;
}

void write_raw(hid_t loc, const std::string& name, hid_t type, const void* data, const std::vector<hsize_t>& dims,
               hsize_t chunk_rows) {
  Handle space(HT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
  Handle dcpl(HT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  hsize_t total = 1;
  for (auto d : dims) total *= d;
  if (total > 0) {
    std::vector<hsize_t> chunk = dims;
    hsize_t row_elems = 1;
    for (size_t i = 1; i < dims.size(); ++i) row_elems *= dims[i];
    if (chunk_rows == 0) {
      // ~1 MiB chunks: large enough for throughput, small enough to localise a checksum failure.
      const hsize_t elem = H5Tget_size(type);
      chunk_rows = std::max<hsize_t>(1, (1u << 20) / std::max<hsize_t>(1, row_elems * elem));
    }
    chunk[0] = std::min<hsize_t>(dims[0], chunk_rows);
    if (chunk[0] == 0) chunk[0] = 1;
    HT_H5_CHECK(H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data()));
    HT_H5_CHECK(H5Pset_fletcher32(dcpl.id()));
  }
  Handle lcpl(HT_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose);
  HT_H5_CHECK(H5Pset_create_intermediate_group(lcpl.id(), 1));
  Handle ds(HT_H5_CHECK(H5Dcreate2(loc, name.c_str(), type, space.id(), lcpl.id(), dcpl.id(), H5P_DEFAULT)),
            H5Dclose);
  if (total > 0) HT_H5_CHECK(H5Dwrite(ds.id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

void write_string(hid_t loc, const std::string& name, const std::string& text) {
  Handle type = detail::fixed_string_type(text.size());
  Handle space(HT_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  Handle lcpl(HT_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose);
  HT_H5_CHECK(H5Pset_create_intermediate_group(lcpl.id(), 1));
  Handle ds(HT_H5_CHECK(H5Dcreate2(loc, name.c_str(), type.id(), space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT)),
            H5Dclose);
  const std::string padded = text.empty() ? std::string(1, '\0') : text;
  HT_H5_CHECK(H5Dwrite(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()));
}

void write_checked_string(hid_t loc, const std::string& name, const std::string& text) {
  Handle type = detail::fixed_string_type(text.size());
  const std::string padded = text.empty() ? std::string(1, '\0') : text;
  write_raw(loc, name, type.id(), padded.data(), {1}, 1);
}

std::string read_string(hid_t loc, const std::string& name) {
  Handle ds = open_dataset(loc, name);
  Handle type(HT_H5_CHECK(H5Dget_type(ds.id())), H5Tclose);
  HT_REQUIRE(H5Tget_class(type.id()) == H5T_STRING, ExitCode::kData, "{}: dataset '{}' is not a string",
             file_name(loc), name);
  HT_REQUIRE(H5Tis_variable_str(type.id()) <= 0, ExitCode::kData, "{}: dataset '{}' is a variable-length string",
             file_name(loc), name);
  Handle space(HT_H5_CHECK(H5Dget_space(ds.id())), H5Sclose);
  HT_REQUIRE(element_count(space.id()) == 1, ExitCode::kData, "{}: dataset '{}' holds {} strings, expected one",
             file_name(loc), name, element_count(space.id()));
  const size_t n = H5Tget_size(type.id());
  HT_REQUIRE(n > 0 && n <= (size_t{1} << 30), ExitCode::kData, "{}: dataset '{}' has an implausible string size {}",
             file_name(loc), name, n);
  std::string out(n, '\0');
  if (H5Dread(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) fail_read(loc, name, "");
  out.resize(std::min(out.size(), out.find('\0')));
  return out;
}

Handle open_dataset(hid_t loc, const std::string& name) {
  HT_REQUIRE(exists(loc, name), ExitCode::kData, "{}: dataset '{}' is missing", file_name(loc), name);
  hid_t id = H5Dopen2(loc, name.c_str(), H5P_DEFAULT);
  HT_REQUIRE(id >= 0, ExitCode::kData, "{}: '{}' cannot be opened as a dataset (a group, or damaged?)",
             file_name(loc), name);
  Handle ds(id, H5Dclose);
  // Our files hold their data themselves. A dataset reached through an external link lives in
  // another file, whose chunk addresses the pread readers would apply to this file's descriptor.
  HT_REQUIRE(object_info(loc, ".").fileno == object_info(id, ".").fileno, ExitCode::kData,
             "{}: dataset '{}' is an external link into another file ({}); not supported", file_name(loc), name,
             file_name(id));
  return ds;
}

ObjectInfo object_info(hid_t loc, const std::string& name) {
  // The 1.10 call under its explicit name: Debian builds HDF5 with the 1.8 API as default, and
  // 1.12 renamed the struct.
#if H5_VERSION_GE(1, 12, 0)
  H5O_info1_t info{};
#else
  H5O_info_t info{};
#endif
  HT_REQUIRE(H5Oget_info_by_name2(loc, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0, ExitCode::kData,
             "{}: object '{}' cannot be opened (damaged?)", file_name(loc), name);
  const ObjectType type = info.type == H5O_TYPE_GROUP     ? ObjectType::kGroup
                          : info.type == H5O_TYPE_DATASET ? ObjectType::kDataset
                                                          : ObjectType::kOther;
  return ObjectInfo{type, info.rc, info.fileno};
}

DatasetInfo info(hid_t loc, const std::string& name) {
  Handle ds = open_dataset(loc, name);
  DatasetInfo out;
  Handle space(HT_H5_CHECK(H5Dget_space(ds.id())), H5Sclose);
  const int rank = HT_H5_CHECK(H5Sget_simple_extent_ndims(space.id()));
  out.dims.resize(static_cast<size_t>(rank));
  if (rank > 0) HT_H5_CHECK(H5Sget_simple_extent_dims(space.id(), out.dims.data(), nullptr));
  Handle type(HT_H5_CHECK(H5Dget_type(ds.id())), H5Tclose);
  out.type_class = detail::type_class(type.id());
  out.type_size = H5Tget_size(type.id());
  out.is_signed = out.type_class == TypeClass::kInteger && H5Tget_sign(type.id()) == H5T_SGN_2;
  Handle dcpl(HT_H5_CHECK(H5Dget_create_plist(ds.id())), H5Pclose);
  const int nfilters = H5Pget_nfilters(dcpl.id());
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0;
    size_t nelmts = 0;
    unsigned filter_config = 0;
    if (H5Pget_filter2(dcpl.id(), static_cast<unsigned>(i), &flags, &nelmts, nullptr, 0, nullptr, &filter_config) ==
        H5Z_FILTER_FLETCHER32)
      out.has_fletcher32 = true;
  }
  return out;
}

void require_plain_integer(hid_t loc, const std::string& name, const DatasetInfo& info) {
  const std::string where = file_name(loc) + ":" + name;
  HT_REQUIRE(info.type_class == TypeClass::kInteger, ExitCode::kData, "{}: not an integer dataset", where);
  const size_t size = info.type_size;
  HT_REQUIRE(size == 1 || size == 2 || size == 4 || size == 8, ExitCode::kData, "{}: unsupported integer size {}",
             where, size);
  Handle ds = open_dataset(loc, name);
  Handle type(HT_H5_CHECK(H5Dget_type(ds.id())), H5Tclose);
  HT_REQUIRE(H5Tget_order(type.id()) == H5T_ORDER_LE || size == 1, ExitCode::kData,
             "{}: big-endian integers are not supported", where);
  HT_REQUIRE(H5Tget_precision(type.id()) == size * 8 && H5Tget_offset(type.id()) == 0, ExitCode::kData,
             "{}: integer datatype with precision {} and offset {} in {} bytes (damaged datatype message?)", where,
             H5Tget_precision(type.id()), H5Tget_offset(type.id()), size);
  H5T_pad_t lsb = H5T_PAD_ERROR, msb = H5T_PAD_ERROR;
  HT_REQUIRE(H5Tget_pad(type.id(), &lsb, &msb) >= 0 && lsb == H5T_PAD_ZERO && msb == H5T_PAD_ZERO, ExitCode::kData,
             "{}: integer datatype with non-zero padding (damaged datatype message?)", where);
}

void require_within_file(hid_t loc, const std::string& name, const DatasetInfo& info) {
  double declared = static_cast<double>(info.type_size);
  for (auto d : info.dims) declared *= static_cast<double>(d);
  Handle file(HT_H5_CHECK(H5Iget_file_id(loc)), H5Fclose);
  hsize_t file_bytes = 0;
  HT_H5_CHECK(H5Fget_filesize(file.id(), &file_bytes));
  HT_REQUIRE(declared <= static_cast<double>(file_bytes), ExitCode::kData,
             "{}: dataset '{}' declares {:.0f} bytes but the file has {} bytes (damaged header?)", file_name(loc), name,
             declared, file_bytes);
}

void read_raw(hid_t loc, const std::string& name, hid_t mem_type, void* out) {
  Handle ds = open_dataset(loc, name);
  if (H5Dread(ds.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) fail_read(loc, name, "");
}

template <typename T>
std::vector<T> read(hid_t loc, const std::string& name) {
  const auto i = info(loc, name);
  require_within_file(loc, name, i);
  hsize_t n = 1;
  for (auto d : i.dims) n *= d;
  std::vector<T> out(n);
  if (n > 0) read_raw(loc, name, native_type<T>(), out.data());
  return out;
}

template <typename T>
void read_rows(hid_t dataset, hsize_t start, hsize_t count, T* out) {
  Handle fspace(HT_H5_CHECK(H5Dget_space(dataset)), H5Sclose);
  const int rank = HT_H5_CHECK(H5Sget_simple_extent_ndims(fspace.id()));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  HT_H5_CHECK(H5Sget_simple_extent_dims(fspace.id(), dims.data(), nullptr));
  HT_REQUIRE(rank >= 1 && start + count <= dims[0], ExitCode::kData,
             "{}: dataset '{}': row range [{}, {}) outside a dataset of {} rows", file_name(dataset),
             object_name(dataset), start, start + count, rank >= 1 ? dims[0] : 0);
  std::vector<hsize_t> offset(dims.size(), 0), extent = dims;
  offset[0] = start;
  extent[0] = count;
  HT_H5_CHECK(H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, offset.data(), nullptr, extent.data(), nullptr));
  Handle mspace(HT_H5_CHECK(H5Screate_simple(rank, extent.data(), nullptr)), H5Sclose);
  if (H5Dread(dataset, native_type<T>(), mspace.id(), fspace.id(), H5P_DEFAULT, out) < 0)
    fail_read(dataset, object_name(dataset), fmt::format(" rows [{}, {})", start, start + count));
}

#define HT_INSTANTIATE(T)                                                  \
  template std::vector<T> read<T>(hid_t, const std::string&);             \
  template void read_rows<T>(hid_t, hsize_t, hsize_t, T*);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
HT_INSTANTIATE(uint8_t)
HT_INSTANTIATE(int8_t)
HT_INSTANTIATE(uint16_t)
HT_INSTANTIATE(int32_t)
HT_INSTANTIATE(uint32_t)
HT_INSTANTIATE(int64_t)
HT_INSTANTIATE(uint64_t)
#undef HT_INSTANTIATE


}  // namespace ht::io
