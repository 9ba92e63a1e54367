#include "comm/mpi_check.h"

#include <mpi.h>

#include "core/error.h"

namespace ht::comm::detail {

void throw_mpi_error(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(ExitCode::kRuntime, fmt::format("{} failed at {}: {}", call, source_location(file, line), text));
}

}  // namespace ht::comm::detail
