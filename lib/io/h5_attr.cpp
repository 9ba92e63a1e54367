// Attributes: small named values on a file, group or dataset (root metadata of our formats).
#include <hdf5.h>

#include <algorithm>

#include "core/error.h"
#include "io/h5.h"
#include "io/h5_check.h"
#include "io/h5_internal.h"

namespace ht::io {

using detail::element_count;

namespace {
void write_attr(hid_t loc, const std::string& name, hid_t type, hid_t space, const void* data) {
  if (H5Aexists(loc, name.c_str()) > 0) HT_H5_CHECK(H5Adelete(loc, name.c_str()));
  Handle a(HT_H5_CHECK(H5Acreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  HT_H5_CHECK(H5Awrite(a.id(), type, data));
}
Handle open_attr(hid_t loc, const std::string& name) {
  HT_REQUIRE(H5Aexists(loc, name.c_str()) > 0, ExitCode::kData, "{}: attribute '{}' is missing", file_name(loc), name);
  return Handle(HT_H5_CHECK(H5Aopen(loc, name.c_str(), H5P_DEFAULT)), H5Aclose);
}

// A scalar attribute is read into a one-element buffer: more elements would overrun it.
void require_one_element(hid_t loc, hid_t attr, const std::string& name) {
  Handle space(HT_H5_CHECK(H5Aget_space(attr)), H5Sclose);
  const hssize_t n = element_count(space.id());
  HT_REQUIRE(n == 1, ExitCode::kData, "{}: attribute '{}' holds {} values, expected one", file_name(loc), name, n);
}
}  // namespace

void set_attr(hid_t loc, const std::string& name, const std::string& value) {
  Handle type(HT_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  HT_H5_CHECK(H5Tset_size(type.id(), std::max<size_t>(1, value.size())));
  Handle space(HT_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  write_attr(loc, name, type.id(), space.id(), padded.data());
}

void set_attr(hid_t loc, const std::string& name, int64_t value) {
  Handle space(HT_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  write_attr(loc, name, H5T_NATIVE_INT64, space.id(), &value);
}

void set_attr(hid_t loc, const std::string& name, double value) {
  Handle space(HT_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  write_attr(loc, name, H5T_NATIVE_DOUBLE, space.id(), &value);
}

void set_attr(hid_t loc, const std::string& name, const std::vector<std::string>& values) {
  size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size());
  std::string flat(width * values.size(), '\0');
  for (size_t i = 0; i < values.size(); ++i) flat.replace(i * width, values[i].size(), values[i]);
  Handle type = detail::fixed_string_type(width);
  const hsize_t n = values.size();
  Handle space(HT_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  write_attr(loc, name, type.id(), space.id(), flat.data());
}

bool has_attr(hid_t loc, const std::string& name) { return H5Aexists(loc, name.c_str()) > 0; }

std::string attr_string(hid_t loc, const std::string& name) {
  Handle a = open_attr(loc, name);
  Handle type(HT_H5_CHECK(H5Aget_type(a.id())), H5Tclose);
  HT_REQUIRE(detail::type_class(type.id()) == TypeClass::kString, ExitCode::kData, "{}: attribute '{}' is not a string",
             file_name(loc), name);
  require_one_element(loc, a.id(), name);
  if (H5Tis_variable_str(type.id()) > 0) {
    char* p = nullptr;
    Handle mtype(HT_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
    HT_H5_CHECK(H5Tset_size(mtype.id(), H5T_VARIABLE));
    HT_H5_CHECK(H5Aread(a.id(), mtype.id(), &p));
    std::string out = p ? p : "";
    H5free_memory(p);
    return out;
  }
  const size_t size = H5Tget_size(type.id());
  HT_REQUIRE(size > 0 && size <= (size_t{1} << 20), ExitCode::kData, "{}: attribute '{}' has an implausible size {}",
             file_name(loc), name, size);
  std::string out(size, '\0');
  HT_H5_CHECK(H5Aread(a.id(), type.id(), out.data()));
  out.resize(std::min(out.size(), out.find('\0')));
  return out;
}

int64_t attr_int(hid_t loc, const std::string& name) {
  Handle a = open_attr(loc, name);
  Handle type(HT_H5_CHECK(H5Aget_type(a.id())), H5Tclose);
  HT_REQUIRE(H5Tget_class(type.id()) == H5T_INTEGER, ExitCode::kData, "{}: attribute '{}' is not an integer",
             file_name(loc), name);
  require_one_element(loc, a.id(), name);
  int64_t v = 0;
  HT_H5_CHECK(H5Aread(a.id(), H5T_NATIVE_INT64, &v));
  return v;
}

double attr_double(hid_t loc, const std::string& name) {
  Handle a = open_attr(loc, name);
  Handle type(HT_H5_CHECK(H5Aget_type(a.id())), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.id());
  HT_REQUIRE(cls == H5T_FLOAT || cls == H5T_INTEGER, ExitCode::kData, "{}: attribute '{}' is not a number",
             file_name(loc), name);
  require_one_element(loc, a.id(), name);
  double v = 0;
  HT_H5_CHECK(H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v));
  return v;
}

std::vector<std::string> attr_strings(hid_t loc, const std::string& name) {
  Handle a = open_attr(loc, name);
  Handle type(HT_H5_CHECK(H5Aget_type(a.id())), H5Tclose);
  HT_REQUIRE(H5Tget_class(type.id()) == H5T_STRING, ExitCode::kData, "{}: attribute '{}' is not a string list",
             file_name(loc), name);
  Handle space(HT_H5_CHECK(H5Aget_space(a.id())), H5Sclose);
  const hssize_t n = element_count(space.id());
  HT_REQUIRE(n >= 0 && n <= (1 << 20), ExitCode::kData, "{}: attribute '{}' holds an implausible {} strings",
             file_name(loc), name, n);
  std::vector<std::string> out;
  if (H5Tis_variable_str(type.id()) > 0) {
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    Handle mtype(HT_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
    HT_H5_CHECK(H5Tset_size(mtype.id(), H5T_VARIABLE));
    HT_H5_CHECK(H5Aread(a.id(), mtype.id(), ptrs.data()));
    for (char* p : ptrs) { out.emplace_back(p ? p : ""); H5free_memory(p); }
    return out;
  }
  const size_t width = H5Tget_size(type.id());
  HT_REQUIRE(width > 0 && width <= 4096, ExitCode::kData, "{}: attribute '{}' has strings of implausible width {}",
             file_name(loc), name, width);
  std::string flat(width * static_cast<size_t>(n), '\0');
  HT_H5_CHECK(H5Aread(a.id(), type.id(), flat.data()));
  for (hssize_t i = 0; i < n; ++i) {
    std::string s = flat.substr(static_cast<size_t>(i) * width, width);
    s.resize(std::min(s.size(), s.find('\0')));
    out.push_back(s);
  }
  return out;
}

}  // namespace ht::io
