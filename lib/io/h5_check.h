// Private to lib/io/: the check every HDF5 call of io/*.cpp goes through. The only place that turns
// a failed HDF5 call into an ht::Error, so HDF5's error stack is read nowhere else. Include it after
// <hdf5.h> (the macro's expansion needs HDF5's types; this header does not).
#pragma once

namespace ht::io::detail {

// Throws ht::Error(kData) "HDF5 call <call> failed at <file:line>: <HDF5's innermost message>" and
// clears HDF5's error stack.
[[noreturn]] void throw_h5_error(const char* call, const char* file, int line);

}  // namespace ht::io::detail

// Evaluates an HDF5 call once; negative ids/status throw with the call and location.
#define HT_H5_CHECK(call)                                                          \
  ([&]() {                                                                         \
    auto ht_h5_rc_ = (call);                                                       \
    if (ht_h5_rc_ < 0) ::ht::io::detail::throw_h5_error(#call, __FILE__, __LINE__); \
    return ht_h5_rc_;                                                              \
  }())
