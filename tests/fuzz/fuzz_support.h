// Shared pieces of the libFuzzer targets (tests/fuzz/fuzz_*.cpp, built by scripts/fuzz.sh):
// the verdict on an exception, a scratch directory on tmpfs, and a structure-aware HDF5 writer
// that turns fuzz bytes into a *valid* HDF5 file with hostile content (attribute types, shapes
// and values; dataset dtypes, dims, layouts, filters; links and cycles). HDF5's own file parser is
// deliberately not what gets fuzzed: only what our readers make of what HDF5 hands them.
//
// Convention: FuzzedDataProvider yields 0 once the input is exhausted, and choice 0 is always the
// well-formed value, so the empty input and short inputs describe a valid file; mutations branch
// off from there.
#pragma once
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace ht::fuzz {

// A finding: libFuzzer keeps the input when the process aborts.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n=== FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// How often each step completed and was refused, printed at exit when HT_FUZZ_STATS is set (to
// see how deep the inputs of a corpus get: `HT_FUZZ_STATS=1 build-fuzz/fuzz/fuzz_x -runs=0 <corpus>`).
struct StepCounts {
  std::map<std::string, std::pair<long, long>> counts;  // step -> (completed, refused)
  ~StepCounts() {
    if (!std::getenv("HT_FUZZ_STATS")) return;
    for (const auto& [step, c] : counts)
      std::fprintf(stderr, "fuzz stats: %-22s completed %8ld  refused %8ld\n", step.c_str(), c.first, c.second);
  }
};
inline StepCounts& step_counts() {
  static StepCounts c;
  return c;
}

// Runs body: a refusal by ht::Error is the expected answer to bad input; any other exception is a
// finding. Returns true when body completed.
template <typename F>
bool only_ht_errors(const char* what, F&& body) {
  auto& count = step_counts().counts[what];
  try {
    body();
    ++count.first;
    return true;
  } catch (const Error&) {
    ++count.second;
    return false;
  } catch (const std::exception& e) {
    finding(std::string(what) + ": exception other than ht::Error: " + e.what());
  } catch (...) {
    finding(std::string(what) + ": non-std exception");
  }
}

// Once per process: silence logs and HDF5's error stack (our messages replace it).
inline void quiet_process() {
  static bool done = false;
  if (done) return;
  done = true;
  log::init(0, 1, log::Level::kOff);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// A directory for this process's files, on tmpfs when there is one, removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    struct stat st {};
    const std::string base = ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/ht-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) finding("cannot create a scratch directory under " + base);
    static std::string keep = tmpl;
    std::atexit([] {
      ::nftw(keep.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
             FTW_DEPTH | FTW_PHYS);
    });
    return tmpl;
  }();
  return dir;
}

// Removes every entry of a scratch sub-directory (not recursive into links).
inline void clear_dir(const std::string& dir) {
  ::nftw(dir.c_str(), [](const char* p, const struct stat*, int level, FTW* f) { return f->level > 0 ? ::remove(p) : 0; },
         16, FTW_DEPTH | FTW_PHYS);
}

// ---- HDF5 building blocks (every call soft: a creation HDF5 refuses just leaves the object out) -------------

struct H5Obj {
  hid_t id = H5I_INVALID_HID;
  herr_t (*close)(hid_t) = nullptr;
  H5Obj() = default;
  H5Obj(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  H5Obj(H5Obj&& o) noexcept : id(o.id), close(o.close) { o.id = H5I_INVALID_HID; }
  H5Obj(const H5Obj&) = delete;
  H5Obj& operator=(const H5Obj&) = delete;
  H5Obj& operator=(H5Obj&& o) noexcept {
    if (this != &o) {
      if (id >= 0 && close) close(id);
      id = o.id;
      close = o.close;
      o.id = H5I_INVALID_HID;
    }
    return *this;
  }
  ~H5Obj() {
    if (id >= 0 && close) close(id);
  }
  bool ok() const { return id >= 0; }
};

inline H5Obj lcpl_intermediate() {
  H5Obj p(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  if (p.ok()) H5Pset_create_intermediate_group(p.id, 1);
  return p;
}

// Integer values that matter to the readers: limits, off-by-one of the format's constants.
inline int64_t interesting_int(FuzzedDataProvider& fdp) {
  static const int64_t kValues[] = {0, 1, -1, 2, 255, 256, 257, 258, 259, 65535, 65536, 65537,
                                    (int64_t{1} << 24), (int64_t{1} << 24) + 1, (int64_t{1} << 31) - 1,
                                    (int64_t{1} << 31), (int64_t{1} << 32) - 1, (int64_t{1} << 32),
                                    (int64_t{1} << 32) + 1, (int64_t{1} << 40), (int64_t{1} << 62), INT64_MAX,
                                    INT64_MIN, INT64_MIN + 1};
  return kValues[fdp.ConsumeIntegralInRange<size_t>(0, sizeof(kValues) / sizeof(kValues[0]) - 1)];
}

// An integer: the plausible one (choice 0), an interesting one, or any.
inline int64_t fuzz_int(FuzzedDataProvider& fdp, int64_t plausible) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 5: return interesting_int(fdp);
    case 6: return fdp.ConsumeIntegral<int64_t>();
    case 7: return plausible + fdp.ConsumeIntegralInRange<int64_t>(-3, 3);
    default: return plausible;
  }
}

// A string: one of the candidates (choice 0 = the first), or arbitrary bytes (NULs included).
inline std::string fuzz_string(FuzzedDataProvider& fdp, const std::vector<std::string>& candidates) {
  const size_t i = fdp.ConsumeIntegralInRange<size_t>(0, candidates.size() + 1);
  if (i < candidates.size()) return candidates[i];
  if (i == candidates.size()) return fdp.ConsumeRandomLengthString(64);
  return std::string(fdp.ConsumeIntegralInRange<size_t>(0, 8192), 'x');  // long
}

inline hid_t fixed_string_type(FuzzedDataProvider& fdp, size_t size) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, size == 0 ? 1 : size);
  static const H5T_str_t kPads[] = {H5T_STR_NULLPAD, H5T_STR_NULLTERM, H5T_STR_SPACEPAD};
  H5Tset_strpad(t, kPads[fdp.ConsumeIntegralInRange<int>(0, 2)]);
  if (fdp.ConsumeBool()) H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

// An integer type other than int64: every size and sign, both byte orders, odd precisions.
inline hid_t odd_integer_type(FuzzedDataProvider& fdp) {
  static const hid_t kTypes[] = {H5T_STD_U8LE, H5T_STD_I8LE, H5T_STD_U16LE, H5T_STD_I16LE, H5T_STD_U32LE,
                                 H5T_STD_I32LE, H5T_STD_U64LE, H5T_STD_I64LE, H5T_STD_U16BE, H5T_STD_I32BE,
                                 H5T_STD_U32BE, H5T_STD_I64BE};
  hid_t t = H5Tcopy(kTypes[fdp.ConsumeIntegralInRange<size_t>(0, sizeof(kTypes) / sizeof(kTypes[0]) - 1)]);
  switch (fdp.ConsumeIntegralInRange<int>(0, 4)) {
    case 1: {  // a precision below the size, at some offset (what a damaged datatype message could say)
      const size_t bits = H5Tget_size(t) * 8;
      const size_t prec = fdp.ConsumeIntegralInRange<size_t>(1, bits);
      H5Tset_precision(t, prec);
      H5Tset_offset(t, fdp.ConsumeIntegralInRange<size_t>(0, bits - prec));
      break;
    }
    case 2: H5Tset_pad(t, H5T_PAD_ONE, H5T_PAD_ONE); break;
    case 3: H5Tset_size(t, fdp.ConsumeIntegralInRange<size_t>(1, 16)); break;
    default: break;
  }
  return t;
}

// A type of another class than the reader expects.
inline hid_t other_class_type(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 6)) {
    case 0: return H5Tcopy(H5T_IEEE_F32LE);
    case 1: return H5Tcopy(H5T_IEEE_F64BE);
    case 2: return fixed_string_type(fdp, fdp.ConsumeIntegralInRange<size_t>(1, 16));
    case 3: {
      hid_t t = H5Tcreate(H5T_COMPOUND, 8);
      H5Tinsert(t, "a", 0, H5T_NATIVE_INT32);
      H5Tinsert(t, "b", 4, H5T_NATIVE_INT32);
      return t;
    }
    case 4: {
      hid_t t = H5Tenum_create(H5T_NATIVE_INT32);
      int v = 1;
      H5Tenum_insert(t, "one", &v);
      return t;
    }
    case 5: {
      hsize_t n = 2;
      return H5Tarray_create2(H5T_NATIVE_INT64, 1, &n);
    }
    default: {
      hid_t t = H5Tcreate(H5T_OPAQUE, 4);
      H5Tset_tag(t, "fuzz");
      return t;
    }
  }
}

// A dataspace for an attribute: scalar (choice 0), simple with 0..4 elements, or null.
inline hid_t attr_space(FuzzedDataProvider& fdp, bool scalar) {
  if (scalar) return H5Screate(H5S_SCALAR);
  switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return H5Screate(H5S_NULL);
    case 1: {
      hsize_t d[2] = {fdp.ConsumeIntegralInRange<hsize_t>(0, 3), fdp.ConsumeIntegralInRange<hsize_t>(0, 3)};
      return H5Screate_simple(2, d, nullptr);
    }
    default: {
      hsize_t n = fdp.ConsumeIntegralInRange<hsize_t>(0, 64);
      return H5Screate_simple(1, &n, nullptr);
    }
  }
}

// Writes attribute `name` with `type` over `space`, element bytes taken from the provider (filled up).
inline void write_attr_bytes(FuzzedDataProvider& fdp, hid_t loc, const char* name, hid_t type, hid_t space,
                             const std::string& first_value = {}) {
  if (type < 0 || space < 0) return;
  const hssize_t n = H5Sget_select_npoints(space);
  const size_t size = H5Tget_size(type);
  if (n < 0 || size == 0 || size > 4096) return;
  std::vector<uint8_t> buf(static_cast<size_t>(n > 0 ? n : 0) * size, 0);
  if (!first_value.empty() && !buf.empty()) std::memcpy(buf.data(), first_value.data(), std::min(size, first_value.size()));
  else if (!buf.empty()) {
    std::vector<uint8_t> raw = fdp.ConsumeBytes<uint8_t>(buf.size());
    std::copy(raw.begin(), raw.end(), buf.begin());
  }
  H5Obj a(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (a.ok() && n > 0) H5Awrite(a.id, type, buf.data());
}

inline void write_vlen_string_attr(hid_t loc, const char* name, const std::vector<std::string>& values, bool null_first,
                                   bool scalar) {
  H5Obj t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.id, H5T_VARIABLE);
  hsize_t n = values.size();
  H5Obj s(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (null_first && !ptrs.empty()) ptrs[0] = nullptr;
  if (scalar && ptrs.empty()) ptrs.push_back("");
  H5Obj a(H5Acreate2(loc, name, t.id, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (a.ok() && (!ptrs.empty())) H5Awrite(a.id, t.id, ptrs.data());
}

// A string attribute: well-formed (choice 0) or with a hostile type or shape.
inline void fuzz_string_attr(FuzzedDataProvider& fdp, hid_t loc, const char* name,
                             const std::vector<std::string>& candidates) {
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 15);
  if (mode == 8) return;  // absent
  const std::string value = fuzz_string(fdp, candidates);
  switch (mode) {
    case 9: {  // several elements, or none, or a null dataspace
      H5Obj t(fixed_string_type(fdp, std::max<size_t>(1, value.size())), H5Tclose);
      H5Obj s(attr_space(fdp, false), H5Sclose);
      write_attr_bytes(fdp, loc, name, t.id, s.id, value);
      return;
    }
    case 10: case 11: {  // variable-length, scalar or a list, maybe a null pointer
      write_vlen_string_attr(loc, name, {value, value}, fdp.ConsumeBool(), mode == 10);
      return;
    }
    case 12: {  // another type class
      H5Obj t(other_class_type(fdp), H5Tclose);
      H5Obj s(attr_space(fdp, fdp.ConsumeBool()), H5Sclose);
      write_attr_bytes(fdp, loc, name, t.id, s.id);
      return;
    }
    case 13: {  // an integer where a string belongs
      H5Obj t(odd_integer_type(fdp), H5Tclose);
      H5Obj s(attr_space(fdp, true), H5Sclose);
      write_attr_bytes(fdp, loc, name, t.id, s.id);
      return;
    }
    case 14: {  // a huge fixed-size string
      H5Obj t(fixed_string_type(fdp, fdp.ConsumeIntegralInRange<size_t>(1, size_t{1} << 22)), H5Tclose);
      H5Obj s(H5Screate(H5S_SCALAR), H5Sclose);
      H5Obj a(H5Acreate2(loc, name, t.id, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      return;  // never written: HDF5 reads the fill value
    }
    default: {
      H5Obj t(fixed_string_type(fdp, value.size()), H5Tclose);
      H5Obj s(H5Screate(H5S_SCALAR), H5Sclose);
      H5Obj a(H5Acreate2(loc, name, t.id, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      std::string padded = value.empty() ? std::string(1, '\0') : value;
      if (a.ok()) H5Awrite(a.id, t.id, padded.data());
      return;
    }
  }
}

// A number attribute (an integer; real = a float is well-formed too): well-formed or hostile.
inline void fuzz_number_attr(FuzzedDataProvider& fdp, hid_t loc, const char* name, int64_t plausible,
                             bool real = false) {
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 15);
  if (mode == 8) return;  // absent
  const int64_t v = fuzz_int(fdp, plausible);
  switch (mode) {
    case 9: {  // several elements, none, null dataspace
      H5Obj s(attr_space(fdp, false), H5Sclose);
      write_attr_bytes(fdp, loc, name, H5T_STD_I64LE, s.id, std::string(reinterpret_cast<const char*>(&v), 8));
      return;
    }
    case 10: case 11: {  // another integer type (value written through HDF5's conversion, or raw bytes)
      H5Obj t(odd_integer_type(fdp), H5Tclose);
      H5Obj s(H5Screate(H5S_SCALAR), H5Sclose);
      H5Obj a(H5Acreate2(loc, name, t.id, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      if (!a.ok()) return;
      if (mode == 10) {
        H5Awrite(a.id, H5T_NATIVE_INT64, &v);
      } else {
        std::vector<uint8_t> raw = fdp.ConsumeBytes<uint8_t>(H5Tget_size(t.id));
        raw.resize(H5Tget_size(t.id), 0xff);
        H5Awrite(a.id, t.id, raw.data());
      }
      return;
    }
    case 12: {  // a float
      static const double kFloats[] = {1.5, -0.0, 1e300, -1e300, 9.3e18, NAN, INFINITY, -INFINITY, 4294967296.0};
      const double d = fdp.ConsumeBool() ? static_cast<double>(v)
                                         : kFloats[fdp.ConsumeIntegralInRange<size_t>(0, sizeof(kFloats) / 8 - 1)];
      H5Obj s(H5Screate(H5S_SCALAR), H5Sclose);
      H5Obj a(H5Acreate2(loc, name, fdp.ConsumeBool() ? H5T_IEEE_F64LE : H5T_IEEE_F32BE, s.id, H5P_DEFAULT,
                         H5P_DEFAULT),
              H5Aclose);
      if (a.ok()) H5Awrite(a.id, H5T_NATIVE_DOUBLE, &d);
      return;
    }
    case 13: case 14: {  // a string or another class
      H5Obj t(mode == 13 ? fixed_string_type(fdp, 8) : other_class_type(fdp), H5Tclose);
      H5Obj s(attr_space(fdp, true), H5Sclose);
      write_attr_bytes(fdp, loc, name, t.id, s.id, mode == 13 ? std::to_string(v) : std::string());
      return;
    }
    default: {
      H5Obj s(H5Screate(H5S_SCALAR), H5Sclose);
      H5Obj a(H5Acreate2(loc, name, real ? H5T_IEEE_F64LE : H5T_STD_I64LE, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      if (!a.ok()) return;
      if (real) {
        const double d = static_cast<double>(v);
        H5Awrite(a.id, H5T_NATIVE_DOUBLE, &d);
      } else {
        H5Awrite(a.id, H5T_NATIVE_INT64, &v);
      }
      return;
    }
  }
}

// What a dataset should look like when well-formed.
struct DatasetShape {
  hid_t type = H5T_STD_U16LE;        // file type (a predefined id, not owned)
  std::vector<hsize_t> dims;         // well-formed dims
  hsize_t chunk_rows = 16;           // along the first dimension
  // Element i's well-formed value (row-major).
  std::function<int64_t(hsize_t)> value = [](hsize_t i) { return static_cast<int64_t>(i % 251); };
};

// Writes dataset `name`: well-formed (choice 0) or with another dtype, rank, dims, layout, filter
// pipeline, unwritten chunks, or not a dataset at all. Values are well-formed or fuzz bytes.
// Returns false when it wrote nothing (absent).
inline bool fuzz_dataset(FuzzedDataProvider& fdp, hid_t file, const std::string& name, const DatasetShape& want) {
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 19);
  H5Obj lcpl = lcpl_intermediate();
  if (mode == 8) return false;  // absent
  if (mode == 9) {              // a group of that name
    H5Obj g(H5Gcreate2(file, name.c_str(), lcpl.id, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    return true;
  }
  H5Obj type(H5Tcopy(want.type), H5Tclose);
  std::vector<hsize_t> dims = want.dims;
  bool chunked = true, fletcher = true, write_all = true, huge = false, unlimited = false;
  int filter = 0;
  hsize_t chunk_rows = want.chunk_rows;
  std::vector<hsize_t> chunk_tail;  // chunk dims after the first (default: whole rows)
  switch (mode) {
    case 10: type = H5Obj(odd_integer_type(fdp), H5Tclose); break;
    case 11: type = H5Obj(other_class_type(fdp), H5Tclose); break;
    case 12: {  // another rank
      const int rank = fdp.ConsumeIntegralInRange<int>(0, 3);
      dims.assign(static_cast<size_t>(rank), 0);
      for (auto& d : dims) d = fdp.ConsumeIntegralInRange<hsize_t>(0, 9);
      break;
    }
    case 13: {  // other extents of the same rank
      for (auto& d : dims) d = fdp.ConsumeIntegralInRange<hsize_t>(0, 300);
      break;
    }
    case 14: {  // huge declared extents, nothing written
      for (auto& d : dims) d = fdp.ConsumeBool() ? interesting_int(fdp) & 0x7fffffffffffll : d;
      huge = true;
      write_all = false;
      break;
    }
    case 15: chunked = fdp.ConsumeBool(); fletcher = false; break;  // contiguous / compact, or chunked without checksum
    case 16: filter = fdp.ConsumeIntegralInRange<int>(1, 3); break;  // shuffle, deflate, nbit
    case 17: write_all = false; break;  // chunks left unwritten (a partial write)
    case 18: {                          // other chunk shapes, extendible
      chunk_rows = fdp.ConsumeIntegralInRange<hsize_t>(1, 200);
      unlimited = fdp.ConsumeBool();
      for (size_t i = 1; i < dims.size(); ++i) chunk_tail.push_back(fdp.ConsumeIntegralInRange<hsize_t>(1, 9));
      break;
    }
    case 19: {  // values and chunking from the input
      chunk_rows = fdp.ConsumeIntegralInRange<hsize_t>(1, 64);
      break;
    }
    default: break;
  }
  hsize_t total = 1;
  for (auto d : dims) total = (d != 0 && total > UINT64_MAX / d) ? UINT64_MAX : total * d;
  if (!huge && total > (1u << 16)) return false;
  std::vector<hsize_t> maxdims = dims;
  if (unlimited && !maxdims.empty()) maxdims[0] = H5S_UNLIMITED;
  H5Obj space(dims.empty() ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()),
              H5Sclose);
  H5Obj dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!space.ok() || !dcpl.ok() || !type.ok()) return false;
  if (chunked && !dims.empty()) {
    std::vector<hsize_t> chunk(dims.size());
    chunk[0] = std::max<hsize_t>(1, unlimited ? chunk_rows : std::min(chunk_rows, std::max<hsize_t>(1, dims[0])));
    for (size_t i = 1; i < dims.size(); ++i)
      chunk[i] = i - 1 < chunk_tail.size() ? chunk_tail[i - 1] : std::max<hsize_t>(1, dims[i]);
    if (!unlimited)
      for (size_t i = 0; i < dims.size(); ++i) chunk[i] = std::min(chunk[i], std::max<hsize_t>(1, dims[i]));
    bool zero = false;
    for (size_t i = 0; i < dims.size(); ++i) zero |= dims[i] == 0 && maxdims[i] != H5S_UNLIMITED;
    if (!zero) {
      H5Pset_chunk(dcpl.id, static_cast<int>(chunk.size()), chunk.data());
      if (filter == 1) H5Pset_shuffle(dcpl.id);
      if (filter == 2) H5Pset_deflate(dcpl.id, 1);
      if (filter == 3) H5Pset_nbit(dcpl.id);
      if (fletcher) H5Pset_fletcher32(dcpl.id);
    }
  } else if (mode == 15 && !chunked && total * H5Tget_size(type.id) < 32000) {
    H5Pset_layout(dcpl.id, fdp.ConsumeBool() ? H5D_COMPACT : H5D_CONTIGUOUS);
  }
  H5Obj ds(H5Dcreate2(file, name.c_str(), type.id, space.id, lcpl.id, dcpl.id, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) return false;
  if (huge || total == 0) return true;
  const size_t elem = H5Tget_size(type.id);
  const bool raw = mode == 19 || fdp.ConsumeIntegralInRange<int>(0, 7) == 7;
  if (raw || H5Tget_class(type.id) != H5T_INTEGER) {
    std::vector<uint8_t> buf(static_cast<size_t>(total) * elem, 0);
    std::vector<uint8_t> in = fdp.ConsumeBytes<uint8_t>(buf.size());
    std::copy(in.begin(), in.end(), buf.begin());
    if (H5Tget_class(type.id) == H5T_STRING && H5Tis_variable_str(type.id) > 0) return true;
    if (write_all) H5Dwrite(ds.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    return true;
  }
  std::vector<int64_t> values(static_cast<size_t>(total));
  for (hsize_t i = 0; i < total; ++i) values[i] = want.value(i);
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 7) {  // a few values replaced
    const int n = fdp.ConsumeIntegralInRange<int>(1, 4);
    for (int i = 0; i < n; ++i)
      values[fdp.ConsumeIntegralInRange<size_t>(0, values.size() - 1)] = interesting_int(fdp);
  }
  if (write_all) {
    H5Dwrite(ds.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  } else if (!dims.empty() && dims[0] > 1) {  // only the first rows
    H5Obj fs(H5Dget_space(ds.id), H5Sclose);
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    count[0] = fdp.ConsumeIntegralInRange<hsize_t>(1, dims[0] - 1);
    H5Sselect_hyperslab(fs.id, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    H5Obj ms(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
    H5Dwrite(ds.id, H5T_NATIVE_INT64, ms.id, fs.id, H5P_DEFAULT, values.data());
  }
  return true;
}

// Hostile objects no hpctrain file holds: links of every kind (dangling, cycles, to other files),
// committed datatypes, empty groups. `near` is a path in the file they are put next to.
inline void fuzz_hostile_object(FuzzedDataProvider& fdp, hid_t file, const std::string& near,
                                const std::string& other_file) {
  const std::string parent = near.substr(0, near.rfind('/') == std::string::npos ? 0 : near.rfind('/'));
  const std::string base = near.substr(near.rfind('/') == std::string::npos ? 0 : near.rfind('/') + 1);
  const std::string at = (parent.empty() ? std::string() : parent + "/") + fuzz_string(fdp, {"loop", "x", base});
  H5Obj lcpl = lcpl_intermediate();
  switch (fdp.ConsumeIntegralInRange<int>(0, 6)) {
    case 0: H5Lcreate_soft("/does/not/exist", file, at.c_str(), lcpl.id, H5P_DEFAULT); break;
    case 1: H5Lcreate_soft(parent.empty() ? "/" : ("/" + parent).c_str(), file, at.c_str(), lcpl.id, H5P_DEFAULT); break;
    case 2: H5Lcreate_hard(file, parent.empty() ? "/" : ("/" + parent).c_str(), file, at.c_str(), lcpl.id, H5P_DEFAULT); break;
    case 3: H5Lcreate_external(other_file.c_str(), fuzz_string(fdp, {"/", near, "/train/tokens"}).c_str(), file,
                               at.c_str(), lcpl.id, H5P_DEFAULT);
      break;
    case 4: {
      H5Obj t(H5Tcopy(H5T_NATIVE_INT32), H5Tclose);
      H5Tcommit2(file, at.c_str(), t.id, lcpl.id, H5P_DEFAULT, H5P_DEFAULT);
      break;
    }
    case 5: H5Lcreate_external("/nonexistent/file.h5", "/x", file, at.c_str(), lcpl.id, H5P_DEFAULT); break;
    default: {
      H5Obj g(H5Gcreate2(file, at.c_str(), lcpl.id, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      break;
    }
  }
}

// A new file: default creation properties (choice 0), or with a userblock, or the latest format.
inline hid_t create_file(FuzzedDataProvider& fdp, const std::string& path) {
  H5Obj fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  H5Obj fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 5: H5Pset_userblock(fcpl.id, hsize_t{512} << fdp.ConsumeIntegralInRange<int>(0, 3)); break;
    case 6: H5Pset_libver_bounds(fapl.id, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST); break;
    case 7: H5Pset_libver_bounds(fapl.id, H5F_LIBVER_V110, H5F_LIBVER_V110); break;
    default: break;
  }
  return H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.id, fapl.id);
}

}  // namespace ht::fuzz
