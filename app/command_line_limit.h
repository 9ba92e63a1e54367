// A command line too long for Open MPI's singleton start, caught before MPI_Init. Started without
// mpirun or srun, Open MPI forks its helper `orted` and hands it our whole command line (argv[1..]
// joined by spaces) in one environment string, OMPI_ARGV=...; Linux refuses an exec whose single
// argument or environment string exceeds MAX_ARG_STRLEN (32 pages: 128 KiB), so MPI_Init would
// fail with pages of Open MPI text ("Argument list too long") that name none of our options.
#pragma once
#include <string>

namespace ht::app {

// "" when the start is fine (also under mpirun/srun, which pass the arguments one by one);
// otherwise one line naming the longest argument's option (--prompt: use --prompt-file) and the
// limit.
std::string command_line_too_long(int argc, char** argv);

}  // namespace ht::app
