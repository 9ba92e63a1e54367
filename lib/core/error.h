// Error type, exit codes and the generic check macros (HT_FAIL, HT_REQUIRE).
// Library code throws ht::Error; only app/ catches it and decides how the job ends.
// The checks of MPI and HDF5 calls live beside the only code that makes them: HT_MPI_CHECK in
// comm/mpi_check.h, HT_H5_CHECK in io/h5_check.h (core links neither library). CUDA is reached only
// through libtorch, which checks its own calls.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace ht {

// Process exit codes; documented in README.md ("Exit codes").
enum class ExitCode : int {
  kOk = 0,
  kUsage = 1,    // bad command line or config
  kData = 2,     // data or I/O error (missing, malformed, corrupted file)
  kRuntime = 3,  // failure during training (NaN loss, MPI failure, ...)
  kRequeue = 75  // checkpointed after SIGTERM/SIGUSR1: please requeue (EX_TEMPFAIL)
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// An error every rank of the job met alike and knows of (the outcome was agreed through a
// collective, e.g. comm::run_agreed): app/ prints it once and every rank exits with its code,
// instead of aborting the job from each rank.
class AgreedError : public Error {
 public:
  using Error::Error;
};

// Where the failing call sits, as "file:line" (the path from lib/ on).
std::string source_location(const char* file, int line);

}  // namespace ht

#define HT_FAIL(code, ...) throw ::ht::Error((code), ::fmt::format(__VA_ARGS__))

#define HT_REQUIRE(cond, code, ...)                                   \
  do {                                                                \
    if (!(cond)) throw ::ht::Error((code), ::fmt::format(__VA_ARGS__)); \
  } while (0)
