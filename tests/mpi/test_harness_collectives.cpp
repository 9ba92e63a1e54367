// The MPI harness itself: every rank runs, sees the others, and agrees on a reduction.
#include <gtest/gtest.h>
#include <mpi.h>

TEST(Harness, AllRanksParticipate) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_GE(size, 2) << "MPI tests must run under mpirun -np >= 2";
  int sum = 0, one = rank + 1;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sum, size * (size + 1) / 2);
}
