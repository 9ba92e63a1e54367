#include "app/command_line_limit.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace ht::app {
namespace {

// mpirun sets OMPI_COMM_WORLD_SIZE; srun --mpi=pmix sets PMIX_RANK, --mpi=pmi2 PMI_RANK.
bool started_by_a_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

// The option an argument belongs to: "--prompt" for `--prompt TEXT` and `--prompt=TEXT`.
std::string option_of(char** argv, int i) {
  const std::string arg = argv[i];
  if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) return arg.substr(0, arg.find('='));
  if (i > 1 && std::strncmp(argv[i - 1], "--", 2) == 0) return argv[i - 1];
  return "";
}

}  // namespace

std::string command_line_too_long(int argc, char** argv) {
  if (started_by_a_launcher() || argc < 2) return "";
  const size_t limit_bytes = 32 * static_cast<size_t>(::sysconf(_SC_PAGESIZE));  // MAX_ARG_STRLEN
  size_t joined_bytes = std::strlen("OMPI_ARGV=") + 1;  // with the terminating NUL
  int longest = 1;
  for (int i = 1; i < argc; ++i) {
    joined_bytes += std::strlen(argv[i]) + (i > 1 ? 1 : 0);
    if (std::strlen(argv[i]) > std::strlen(argv[longest])) longest = i;
  }
  if (joined_bytes <= limit_bytes) return "";
  const std::string option = option_of(argv, longest);
  const std::string hint = option == "--prompt" ? "pass the prompt with --prompt-file FILE instead"
                                                : "shorten it, or start hpctrain with `mpirun -np 1`";
  return fmt::format(
      "hpctrain: the command line is {} bytes ({} of them in {}), more than the {} bytes Open MPI can hand to its "
      "helper orted when hpctrain is started without mpirun; {}",
      joined_bytes, std::strlen(argv[longest]), option.empty() ? "one argument" : option, limit_bytes, hint);
}

}  // namespace ht::app
