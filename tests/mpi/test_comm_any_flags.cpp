// comm::AnyFlags over real MPI ranks: the OR of each flag across ranks on every rank, for every
// pattern, on the point-to-point path and the iallreduce fallback, with two rounds outstanding at
// once; and what it is for: a rank that started its round and then makes no MPI call at all does
// not hold up the others' wait (the Trainer starts the step flags before the backward and waits
// after it).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "comm/any_flags.h"
#include "comm/communicator.h"
#include "support/temp_dir.h"

namespace {

using ht::comm::AnyFlags;

// Whether rank r sets flag i in round k: by turns on no rank, on one rank (each in turn) and on
// all of them, the two flags in different turns.
bool sets(int round, int rank, int world, int flag) {
  const int k = round + flag;
  if (k % 3 == 0) return false;
  if (k % 3 == 1) return rank == (k / 3) % world;
  return true;
}

void expect_or_over_rounds(ht::comm::Communicator& comm, int max_peers, bool expect_p2p) {
  const int world = comm.size();
  for (int round = 0; round < 24; ++round) {
    AnyFlags f(comm, {sets(round, comm.rank(), world, 0), sets(round, comm.rank(), world, 1), false}, max_peers);
    EXPECT_EQ(f.point_to_point(), expect_p2p);
    const std::vector<bool> any = f.wait();
    ASSERT_EQ(any.size(), 3u);
    for (int flag = 0; flag < 2; ++flag) {
      bool want = false;
      for (int r = 0; r < world; ++r) want = want || sets(round, r, world, flag);
      EXPECT_EQ(any[flag], want) << "round " << round << " flag " << flag << " rank " << comm.rank();
    }
    EXPECT_FALSE(any[2]);
  }
}

TEST(AnyFlags, OrOfEveryRanksFlagsPointToPoint) {
  auto world = ht::comm::make_mpi_world();
  auto comm = world->split(0, world->rank());
  expect_or_over_rounds(*comm, AnyFlags::kDefaultMaxPeers, true);
}

TEST(AnyFlags, OrOfEveryRanksFlagsThroughTheIallreduceFallback) {
  auto world = ht::comm::make_mpi_world();
  auto comm = world->split(0, world->rank());
  expect_or_over_rounds(*comm, /*max_peers=*/0, false);
}

TEST(AnyFlags, TwoRoundsOutstandingMatchInOrder) {
  auto world = ht::comm::make_mpi_world();
  auto comm = world->split(0, world->rank());
  const int last = comm->size() - 1;
  AnyFlags first(*comm, {comm->rank() == last});
  AnyFlags second(*comm, {false});
  EXPECT_FALSE(second.wait()[0]);  // completed first: must not see the first round's flag
  EXPECT_TRUE(first.wait()[0]);
}

TEST(AnyFlags, OthersCompleteWhileOneRankMakesNoMpiCall) {
  auto world = ht::comm::make_mpi_world();
  auto comm = world->split(0, world->rank());
  const std::string dir = comm->broadcast_string(comm->rank() == 0 ? ht::test::make_temp_dir("ht-anyflags-") : "", 0);
  auto marker = [&](int r) { return dir + "/waited." + std::to_string(r); };

  AnyFlags f(*comm, {comm->rank() == 0});
  if (comm->rank() == 0) {
    // No MPI call until every other rank says (through the file system) that its wait returned.
    // On a path that needed rank 0 to advance the round, they would still be waiting after 60 s.
    bool all_waited = false;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!all_waited && std::chrono::steady_clock::now() < give_up) {
      all_waited = true;
      for (int r = 1; r < comm->size(); ++r) all_waited = all_waited && std::ifstream(marker(r)).good();
      if (!all_waited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(all_waited) << "the other ranks' wait needed rank 0 to call MPI";
    EXPECT_TRUE(f.wait()[0]);
  } else {
    EXPECT_TRUE(f.wait()[0]);
    std::ofstream(marker(comm->rank())) << "waited\n";
  }
  comm->barrier();  // rank 0 removes the directory at exit (support/temp_dir.h)
}

}  // namespace
