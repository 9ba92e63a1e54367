#include "core/error.h"

#include <hdf5.h>
#include <mpi.h>

#include <cstring>

namespace ht {

std::string source_location(const char* file, int line) {
  const char* base = std::strstr(file, "/lib/");
  return fmt::format("{}:{}", base ? base + 1 : file, line);
}

void throw_mpi_error(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(ExitCode::kRuntime, fmt::format("{} failed at {}: {}", call, source_location(file, line), text));
}

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

}  // namespace ht
