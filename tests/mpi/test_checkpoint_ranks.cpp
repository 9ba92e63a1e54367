// Checkpoint Manager under mpirun (2 and 3 ranks): per-rank gather with different sizes per rank,
// the r % old_world mapping on load, verdicts agreed by all ranks (no hang, same error everywhere).
#include <ftw.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "core/error.h"

using ht::checkpoint::Manager;
using ht::checkpoint::Snapshot;

namespace {

class CheckpointRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = ht::comm::make_mpi_world();
    std::string dir;
    if (comm_->rank() == 0) {
      char tmpl[] = "/tmp/ht-ckpt-mpi-XXXXXX";
      ASSERT_NE(::mkdtemp(tmpl), nullptr);
      dir = tmpl;
    }
    root_ = comm_->broadcast_string(dir, 0);
    dir_ = root_ + "/ckpts";
  }
  void TearDown() override {
    comm_->barrier();
    if (comm_->rank() == 0)
      ::nftw(root_.c_str(), [](const char* f, const struct stat*, int, FTW*) { return ::remove(f); }, 16,
             FTW_DEPTH | FTW_PHYS);
  }
  int rank() const { return comm_->rank(); }

  std::unique_ptr<ht::comm::Communicator> comm_;
  std::string root_, dir_;
};

// Shared state identical on all ranks; per-rank state of different sizes and keys.
Snapshot snapshot_of(int rank, int64_t step) {
  Snapshot s;
  s.tensors["model/wte.weight"] = torch::arange(12, torch::kFloat32).reshape({3, 4}) * step;
  s.ints["step"] = step;
  s.reals["lr"] = 0.25;
  s.train_seconds = 7.5 + rank;  // timing is rank 0's: the file holds its value, every rank reads it back
  s.strings["config"] = "[train]\nmax_steps = 20\n";
  s.per_rank["rng/cpu"] = torch::full({rank + 1}, rank, torch::kUInt8);
  s.per_rank["optimizer/exp_avg/wte.weight"] = torch::full({2, rank + 2}, 0.5 * rank + step, torch::kFloat64);
  if (rank == 1) s.per_rank["only/on/rank1"] = torch::ones({7}, torch::kInt64);
  return s;
}

// Flips one byte inside the stored bytes of `t` (found by content), so the damage is in a data chunk.
void flip_byte_inside(const std::string& path, const torch::Tensor& t) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string needle(static_cast<const char*>(t.data_ptr()), t.nbytes());
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << "tensor bytes not found in " << path;
  bytes[at + needle.size() / 2] = static_cast<char>(bytes[at + needle.size() / 2] ^ 0x5a);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_F(CheckpointRanks, EachRankGetsBackItsOwnPerRankState) {
  Manager m(dir_, 2, *comm_);
  const Snapshot mine = snapshot_of(rank(), 10);
  const std::string path = m.save(mine, 10);
  EXPECT_EQ(path, dir_ + "/ckpt-00000010.h5");
  const Snapshot r = m.load(path);
  EXPECT_EQ(r.world_size, comm_->size());
  EXPECT_EQ(r.step, 10);
  EXPECT_EQ(r.ints, mine.ints);
  EXPECT_EQ(r.reals, mine.reals);
  EXPECT_EQ(r.train_seconds, 7.5);
  EXPECT_EQ(r.strings, mine.strings);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_TRUE(torch::equal(r.tensors.at("model/wte.weight"), mine.tensors.at("model/wte.weight")));
  ASSERT_EQ(r.per_rank.size(), mine.per_rank.size());
  for (const auto& [k, t] : mine.per_rank) {
    ASSERT_TRUE(r.per_rank.count(k)) << k;
    EXPECT_EQ(r.per_rank.at(k).scalar_type(), t.scalar_type()) << k;
    EXPECT_TRUE(torch::equal(r.per_rank.at(k), t)) << k;
  }
  // The file holds every rank's group, with each rank's own sizes.
  const Snapshot r0 = ht::checkpoint::read_file(path, comm_->size() - 1);
  EXPECT_EQ(r0.per_rank.at("rng/cpu").numel(), comm_->size());
}

TEST_F(CheckpointRanks, OldRankRModuloOldWorldOnADifferentWorldSize) {
  // Files written "by" runs of 1, 2 and 5 ranks (rank 0 fakes them), loaded by this run.
  for (int old_world : {1, 2, 5}) {
    const std::string path = root_ + "/old-" + std::to_string(old_world) + ".h5";
    if (rank() == 0) {
      std::vector<ht::checkpoint::detail::TensorMap> per_rank;
      for (int o = 0; o < old_world; ++o) per_rank.push_back(snapshot_of(o, 3).per_rank);
      ht::checkpoint::detail::write_file(path, snapshot_of(0, 3), per_rank, 3, old_world);
    }
    comm_->barrier();
    Manager m(dir_, 2, *comm_);
    const Snapshot r = m.load(path);
    EXPECT_EQ(r.world_size, old_world);
    const int old_rank = rank() % old_world;
    EXPECT_TRUE(torch::equal(r.per_rank.at("rng/cpu"), torch::full({old_rank + 1}, old_rank, torch::kUInt8)))
        << "old world " << old_world;
    EXPECT_EQ(r.per_rank.count("only/on/rank1"), old_rank == 1 ? 1u : 0u);
    EXPECT_TRUE(torch::equal(r.tensors.at("model/wte.weight"), snapshot_of(0, 3).tensors.at("model/wte.weight")));
  }
}

TEST_F(CheckpointRanks, DamagedNewestFallsBackOnEveryRank) {
  Manager m(dir_, 3, *comm_);
  m.save(snapshot_of(rank(), 1), 1);
  const std::string newest = m.save(snapshot_of(rank(), 2), 2);
  if (rank() == 0) flip_byte_inside(newest, snapshot_of(0, 2).tensors.at("model/wte.weight"));
  comm_->barrier();
  auto s = m.load_latest();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 1);
  EXPECT_TRUE(torch::equal(s->per_rank.at("rng/cpu"), snapshot_of(rank(), 1).per_rank.at("rng/cpu")));
  // Asking for the damaged file explicitly: the same error on every rank, nobody left waiting.
  try {
    m.load(newest);  // checksum mismatch in /model/wte.weight
    ADD_FAILURE() << "expected an error";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("ckpt-00000002.h5"), std::string::npos) << e.what();
  }
  comm_->barrier();
}

TEST_F(CheckpointRanks, FailedSaveThrowsTheSameErrorEverywhere) {
  if (rank() == 0) std::ofstream(root_ + "/a-file") << "x";
  comm_->barrier();
  Manager m(root_ + "/a-file/ckpts", 2, *comm_);
  try {
    m.save(snapshot_of(rank(), 1), 1);
    ADD_FAILURE() << "expected an error";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("a-file/ckpts"), std::string::npos) << e.what();
  }
  // Still in step: a collective after the failure completes.
  EXPECT_EQ(comm_->allreduce_sum(int64_t{1}), comm_->size());
}

TEST_F(CheckpointRanks, EmptyDirectoryIsAFreshStartOnEveryRank) {
  Manager m(dir_, 2, *comm_);
  EXPECT_FALSE(m.load_latest().has_value());
}
