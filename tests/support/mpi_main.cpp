// GoogleTest main for MPI tests: every rank runs every test; the exit status is the OR over
// ranks, so a failure on any single rank fails the test on all ranks (and so under mpirun).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {
// Non-zero ranks print only failures, so the log stays readable but still names the rank.
class RankPrefixListener : public testing::EmptyTestEventListener {
 public:
  explicit RankPrefixListener(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] FAILURE %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  testing::InitGoogleTest(&argc, argv);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankPrefixListener(rank));
  int local = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && global && !local) std::fprintf(stderr, "a test failed on another rank (see [rank N] lines)\n");
  MPI_Finalize();
  return global;
}
