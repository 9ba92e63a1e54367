#include "io/h5_check.h"

#include <hdf5.h>

#include <string>

#include "core/error.h"

namespace ht::io::detail {
namespace {
herr_t collect_h5_message(unsigned n, const H5E_error2_t* err, void* out) {
  auto* msg = static_cast<std::string*>(out);
  if (n == 0 && err->desc) *msg = err->desc;  // innermost (most specific) description
  return 0;
}
}  // namespace

void throw_h5_error(const char* call, const char* file, int line) {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_h5_message, &detail);
  H5Eclear2(H5E_DEFAULT);
  throw Error(ExitCode::kData, fmt::format("HDF5 call {} failed at {}{}{}", call, source_location(file, line),
                                           detail.empty() ? "" : ": ", detail));
}

}  // namespace ht::io::detail
