// A job where rank 1 dies while rank 0 sits in an all-reduce (mode: kill = SIGKILL, abort =
// std::abort, exit = exit(3) without MPI_Finalize). Driven by rank_dies.sh: mpirun must end the
// whole job with a non-zero status instead of leaving rank 0 blocked forever.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/communicator.h"

int main(int argc, char** argv) {
  ht::comm::MpiSession mpi(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "kill";
  auto comm = ht::comm::make_mpi_world();
  double x = 1.0;
  comm->allreduce(&x, 1, ht::comm::DType::kF64, ht::comm::ReduceOp::kSum);  // both ranks alive and connected
  if (comm->rank() == 1) {
    usleep(300 * 1000);  // let rank 0 enter the next collective
    std::fprintf(stderr, "rank 1: dying (%s)\n", mode.c_str());
    if (mode == "abort") std::abort();
    if (mode == "exit") std::exit(3);
    std::raise(SIGKILL);
  }
  std::fprintf(stderr, "rank 0: entering an all-reduce rank 1 will never join\n");
  for (;;) comm->allreduce(&x, 1, ht::comm::DType::kF64, ht::comm::ReduceOp::kSum);
}
