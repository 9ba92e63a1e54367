// Fails on rank 1 only; tests/support/expect_rank1_failure.sh requires that the whole MPI test
// fails with exactly this failure (the harness self-test).
#include <gtest/gtest.h>
#include <mpi.h>

TEST(Harness, FailureOnRankOneOnlyFailsTheTest) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_NE(rank, 1) << "deliberate failure on rank 1";
}
