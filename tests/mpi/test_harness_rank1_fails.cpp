// Registered with WILL_FAIL: proves that a failure on rank 1 alone fails the whole MPI test.
#include <gtest/gtest.h>
#include <mpi.h>

TEST(Harness, FailureOnRankOneOnlyFailsTheTest) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_NE(rank, 1) << "deliberate failure on rank 1";
}
