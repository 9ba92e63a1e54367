// Private to lib/comm/: the check every MPI call of comm/*.cpp goes through, the only place that
// turns an MPI return code into an ht::Error (with MPI's own text for the code). Include it after
// <mpi.h> (the macro's expansion needs MPI_SUCCESS; this header does not).
#pragma once

namespace ht::comm::detail {

// Throws ht::Error(kRuntime) "<call> failed at <file:line>: <MPI_Error_string of rc>".
[[noreturn]] void throw_mpi_error(int rc, const char* call, const char* file, int line);

}  // namespace ht::comm::detail

#define HT_MPI_CHECK(call)                                                                                    \
  do {                                                                                                        \
    int ht_mpi_rc_ = (call);                                                                                  \
    if (ht_mpi_rc_ != MPI_SUCCESS) ::ht::comm::detail::throw_mpi_error(ht_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
