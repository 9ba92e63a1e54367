// The loader under a real mpirun (-np 2 and -np 3): each rank reads only its share, the union
// of an epoch is complete and disjoint, a restored state continues the same sequence, and the
// global batches equal those of a 1-rank job at the same global batch size.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/loader.h"
#include "unit/test_data_fixtures.h"

using namespace ht::data;

namespace {

constexpr int64_t kSeqLen = 8;

struct World {
  std::unique_ptr<ht::comm::Communicator> comm = ht::comm::make_mpi_world();
  std::string path;
  World() {
    std::string p;
    if (comm->rank() == 0) {
      p = fixtures::make_temp_dir() + "/lm.h5";
      fixtures::write_lm(p, 2001, 500);  // 250 train samples, 62 val samples
    }
    path = comm->broadcast_string(p, 0);
    comm->barrier();
  }
};

// Never destroyed: its communicator must not be freed after the harness calls MPI_Finalize.
World& world() {
  static World* w = new World;
  return *w;
}

LoaderOptions options(int64_t micro, int64_t accum) {
  LoaderOptions o;
  o.seq_len = kSeqLen;
  o.micro_batch = micro;
  o.grad_accum = accum;
  o.seed = 11;
  return o;
}

// All ranks' sample ids of one micro-step, gathered in rank order.
std::vector<int64_t> gather_ids(const Batch& b) {
  auto& comm = *world().comm;
  auto ids = b.sample_ids.contiguous();
  const size_t n = static_cast<size_t>(ids.numel());
  std::vector<int64_t> all(n * static_cast<size_t>(comm.size()));
  comm.allgather(ids.data_ptr<int64_t>(), all.data(), n * sizeof(int64_t));
  return all;
}

}  // namespace

TEST(DataLoaderMpi, EpochIsDisjointAndCompleteAcrossRanks) {
  auto& comm = *world().comm;
  Loader loader(Dataset::open(world().path), options(3, 2), comm);
  const int64_t G = comm.size() * 6;
  ASSERT_EQ(loader.steps_per_epoch(), 250 / G);
  std::set<int64_t> seen;
  for (int64_t m = 0; m < loader.steps_per_epoch() * 2; ++m) {
    const Batch b = loader.next();
    auto ids = b.sample_ids.contiguous();
    for (int64_t i = 0; i < ids.numel(); ++i)  // this rank's data is what the file holds
      EXPECT_EQ(b.input[i][1].item<int64_t>(), (ids[i].item<int64_t>() * kSeqLen + 1) % fixtures::kModulo);
    for (int64_t id : gather_ids(b)) EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice";
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), 250 - 250 % G);
  EXPECT_EQ(loader.epoch(), 1);
}

TEST(DataLoaderMpi, SameGlobalBatchesAsOneRank) {
  auto& comm = *world().comm;
  const int64_t G = 12;  // 12 = 2 ranks x 3 x 2 = 3 ranks x 2 x 2 = 1 rank x 6 x 2
  const int64_t micro = G / 2 / comm.size();
  Loader dist(Dataset::open(world().path), options(micro, 2), comm);
  fixtures::FakeComm solo(0, 1);
  Loader single(Dataset::open(world().path), options(6, 2), solo);
  for (int64_t step = 0; step < 25; ++step) {  // 20 steps per epoch: crosses an epoch
    std::vector<int64_t> a, b;
    for (int m = 0; m < 2; ++m) {
      auto g = gather_ids(dist.next());
      a.insert(a.end(), g.begin(), g.end());
      auto s = single.next().sample_ids.contiguous();
      b.insert(b.end(), s.data_ptr<int64_t>(), s.data_ptr<int64_t>() + s.numel());
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b) << "step " << step;
  }
}

TEST(DataLoaderMpi, RestoreMidEpochContinuesTheSequence) {
  auto& comm = *world().comm;
  Loader a(Dataset::open(world().path), options(2, 3), comm);
  for (int i = 0; i < 7; ++i) a.next();  // mid-step (7 micro-steps of 3 per step)
  const LoaderState st = a.state();
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(gather_ids(a.next()));
  Loader b(Dataset::open(world().path), options(2, 3), comm);
  b.restore(st);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(gather_ids(b.next()), expected[i]) << "micro-step " << i;
}

TEST(DataLoaderMpi, EvalShardsCoverTheValidationSplit) {
  auto& comm = *world().comm;
  EvalReader eval(Dataset::open(world().path), "val", kSeqLen, 5, comm);
  int64_t local = 0, sum = 0;
  Batch b;
  while (eval.next(b)) {
    local += b.input.size(0);
    sum += b.sample_ids.sum().item<int64_t>();
  }
  EXPECT_EQ(comm.allreduce_sum(local), 62);
  EXPECT_EQ(comm.allreduce_sum(sum), 62 * 61 / 2);
}

TEST(DataLoaderMpi, FewerSamplesThanRanksFailsOnEveryRank) {
  auto& comm = *world().comm;
  std::string p;
  if (comm.rank() == 0) {
    p = fixtures::make_temp_dir() + "/tiny.h5";
    fixtures::write_lm(p, 9, 9);  // one sample of 8
  }
  p = comm.broadcast_string(p, 0);
  comm.barrier();
  LoaderOptions o = options(1, 1);
  try {
    Loader l(Dataset::open(p), o, comm);
    ADD_FAILURE() << "no error";
  } catch (const ht::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer samples than the"), std::string::npos) << e.what();
  }
}
