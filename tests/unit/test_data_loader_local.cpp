// Loader and EvalReader in one process: every rank of a W-rank job is simulated with a fake
// communicator of rank r, so coverage, order and resume are checked for W = 1, 2, 3 here and
// for real under mpirun in tests/mpi/test_data_loader.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "data/loader.h"
#include "data/sampler.h"
#include "unit/test_data_fixtures.h"

using namespace ht::data;
using fixtures::FakeComm;

namespace {

constexpr int64_t kSeqLen = 8;
constexpr int64_t kTrainTokens = 1001;  // (1001 - 1) / 8 = 125 samples

std::string lm_file() {
  static const std::string path = [] {
    const std::string p = fixtures::make_temp_dir() + "/lm.h5";
    fixtures::write_lm(p, kTrainTokens, 300);
    return p;
  }();
  return path;
}

LoaderOptions options(int64_t micro, int64_t accum, int64_t prefetch = 3) {
  LoaderOptions o;
  o.seq_len = kSeqLen;
  o.micro_batch = micro;
  o.grad_accum = accum;
  o.seed = 7;
  o.prefetch = prefetch;
  return o;
}

std::vector<int64_t> ids_of(const Batch& b) {
  auto t = b.sample_ids.contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

// Global batches (sorted sample ids per optimizer step) of `steps` steps for a W-rank job.
std::vector<std::vector<int64_t>> global_batches(int world, int64_t micro, int64_t accum, int64_t steps) {
  std::vector<std::unique_ptr<FakeComm>> comms;
  std::vector<std::unique_ptr<Loader>> loaders;
  for (int r = 0; r < world; ++r) {
    comms.push_back(std::make_unique<FakeComm>(r, world));
    loaders.push_back(std::make_unique<Loader>(Dataset::open(lm_file()), options(micro, accum), *comms.back()));
  }
  std::vector<std::vector<int64_t>> out;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int64_t> batch;
    for (int64_t m = 0; m < accum; ++m)
      for (auto& l : loaders) {
        auto ids = ids_of(l->next());
        batch.insert(batch.end(), ids.begin(), ids.end());
      }
    std::sort(batch.begin(), batch.end());
    out.push_back(batch);
  }
  return out;
}

}  // namespace

TEST(DataLoader, ContentMatchesTheFile) {
  FakeComm comm(0, 1);
  Loader loader(Dataset::open(lm_file()), options(4, 1), comm);
  for (int k = 0; k < 5; ++k) {
    Batch b = loader.next();
    ASSERT_EQ(b.input.sizes(), (std::vector<int64_t>{4, kSeqLen}));
    ASSERT_EQ(b.num_tokens, 4 * kSeqLen);
    auto ids = ids_of(b);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t t = 0; t < kSeqLen; ++t) {
        EXPECT_EQ(b.input[i][t].item<int64_t>(), (ids[i] * kSeqLen + t) % fixtures::kModulo);
        EXPECT_EQ(b.target[i][t].item<int64_t>(), (ids[i] * kSeqLen + t + 1) % fixtures::kModulo);
      }
  }
}

TEST(DataLoader, EpochIsDisjointAndCompleteFor1To3Ranks) {
  for (int world = 1; world <= 3; ++world) {
    const int64_t micro = 3, accum = 2, G = world * micro * accum;
    const int64_t steps = 125 / G;
    auto batches = global_batches(world, micro, accum, steps);
    std::set<int64_t> seen;
    for (const auto& b : batches) {
      EXPECT_EQ(static_cast<int64_t>(b.size()), G);
      for (int64_t id : b) {
        EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " seen twice, world " << world;
        EXPECT_GE(id, 0);
        EXPECT_LT(id, 125);
      }
    }
    // Documented remainder: 125 mod G samples are dropped per epoch.
    EXPECT_EQ(static_cast<int64_t>(seen.size()), 125 - 125 % G) << "world " << world;
  }
}

TEST(DataLoader, GlobalOrderIndependentOfRankCountAtFixedGlobalBatch) {
  const auto one = global_batches(1, 6, 2, 12);    // G = 12, crosses into epoch 2 (10 steps/epoch)
  const auto two = global_batches(2, 3, 2, 12);
  const auto three = global_batches(3, 2, 2, 12);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

TEST(DataLoader, EpochsReshuffleAndShuffleOffIsIdentity) {
  FakeComm comm(0, 1);
  auto o = options(25, 1);
  o.shuffle = false;
  Loader ordered(Dataset::open(lm_file()), o, comm);
  EXPECT_EQ(ordered.steps_per_epoch(), 5);
  for (int64_t s = 0; s < 5; ++s) {
    auto ids = ids_of(ordered.next());
    for (int64_t i = 0; i < 25; ++i) EXPECT_EQ(ids[i], s * 25 + i);
  }
  EXPECT_EQ(ordered.epoch(), 1);
  Loader shuffled(Dataset::open(lm_file()), options(125, 1), comm);
  auto e0 = ids_of(shuffled.next());
  auto e1 = ids_of(shuffled.next());
  EXPECT_NE(e0, e1);
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_EQ(e0, e1);  // both are permutations of all 125 samples
}

TEST(DataLoader, RestoreContinuesTheExactSequence) {
  FakeComm comm(0, 1);
  for (int64_t stop_after : {0, 3, 4, 7, 19, 41}) {  // mid-step, step boundary, across epochs
    Loader a(Dataset::open(lm_file()), options(4, 2), comm);  // G = 8, 15 steps per epoch, 30 micro-batches per epoch
    for (int64_t i = 0; i < stop_after; ++i) a.next();
    const LoaderState st = a.state();
    EXPECT_EQ(st.seed, 7);
    std::vector<std::vector<int64_t>> expected;
    for (int i = 0; i < 25; ++i) expected.push_back(ids_of(a.next()));
    auto o = options(4, 2);
    o.seed = 999;  // the state's seed wins
    Loader b(Dataset::open(lm_file()), o, comm);
    b.next();  // some other position first
    b.restore(st);
    for (int i = 0; i < 25; ++i) EXPECT_EQ(ids_of(b.next()), expected[i]) << "after " << stop_after << " + " << i;
  }
}

TEST(DataLoader, RestoreOnAnotherRankCountAtAStepBoundary) {
  FakeComm solo(0, 1);
  Loader a(Dataset::open(lm_file()), options(6, 2), solo);  // G = 12
  for (int i = 0; i < 6; ++i) a.next();  // 3 steps
  const LoaderState st = a.state();
  EXPECT_EQ(st.samples_consumed, 36);
  std::vector<int64_t> expected;
  for (int i = 0; i < 2; ++i) {
    auto ids = ids_of(a.next());
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  std::sort(expected.begin(), expected.end());
  FakeComm r0(0, 2), r1(1, 2);
  Loader b0(Dataset::open(lm_file()), options(3, 2), r0), b1(Dataset::open(lm_file()), options(3, 2), r1);
  b0.restore(st);
  b1.restore(st);
  std::vector<int64_t> got;
  for (int m = 0; m < 2; ++m)
    for (Loader* l : {&b0, &b1}) {
      auto ids = ids_of(l->next());
      got.insert(got.end(), ids.begin(), ids.end());
    }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
  LoaderState bad = st;
  bad.samples_consumed = 5;
  EXPECT_THROW(b0.restore(bad), ht::Error);
}

TEST(DataLoader, SynchronousModeMatchesPrefetch) {
  FakeComm comm(0, 1);
  Loader a(Dataset::open(lm_file()), options(5, 1, 0), comm), b(Dataset::open(lm_file()), options(5, 1, 8), comm);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(ids_of(a.next()), ids_of(b.next()));
}

TEST(DataLoader, ClassificationRowsLabelsAndMask) {
  const std::string path = fixtures::make_temp_dir() + "/cls.h5";
  fixtures::write_cls(path, 30, 6, 10, 3);
  FakeComm comm(0, 1);
  const auto data = Dataset::open(path);
  LoaderOptions o;
  o.micro_batch = 5;
  Loader loader(data, o, comm);
  EXPECT_EQ(loader.meta().label_names.size(), 3u);
  EXPECT_EQ(loader.samples_per_epoch(), 30);
  for (int k = 0; k < 6; ++k) {
    Batch b = loader.next();
    auto ids = ids_of(b);
    for (int64_t i = 0; i < 5; ++i) {
      const int64_t r = ids[i];
      EXPECT_EQ(b.target[i].item<int64_t>(), r % 3);
      for (int64_t j = 0; j < 10; ++j) {
        const bool real = j <= r % 10;
        EXPECT_EQ(b.mask[i][j].item<int64_t>(), real ? 1 : 0);
        EXPECT_EQ(b.input[i][j].item<int64_t>(), real ? (r + j) % 200 : kPadId);
      }
    }
  }
  o.seq_len = 4;  // narrower than the file: the first 4 columns
  Loader narrow(data, o, comm);
  EXPECT_EQ(narrow.next().input.size(1), 4);
  o.seq_len = 11;
  EXPECT_THROW(Loader(data, o, comm), ht::Error);
}

TEST(DataLoader, EvalReaderShardsCoverTheSplitInOrder) {
  // val: 300 tokens -> 37 samples of 8
  std::vector<int64_t> all;
  for (int world = 1; world <= 3; ++world) {
    all.clear();
    for (int r = 0; r < world; ++r) {
      FakeComm comm(r, world);
      EvalReader eval(Dataset::open(lm_file()), "val", kSeqLen, 4, comm);
      Batch b;
      while (eval.next(b)) {
        auto ids = ids_of(b);
        all.insert(all.end(), ids.begin(), ids.end());
        EXPECT_EQ(b.input[0][0].item<int64_t>(), ids[0] * kSeqLen % fixtures::kModulo);
      }
      eval.rewind();
      EXPECT_TRUE(eval.next(b));
    }
    ASSERT_EQ(all.size(), 37u) << "world " << world;
    for (int64_t i = 0; i < 37; ++i) EXPECT_EQ(all[i], i);
  }
}

TEST(DataSampler, PermutationIsDeterministicAndComplete) {
  auto p = epoch_permutation(1000, 3, 0, true);
  EXPECT_EQ(p, epoch_permutation(1000, 3, 0, true));
  EXPECT_NE(p, epoch_permutation(1000, 3, 1, true));
  EXPECT_NE(p, epoch_permutation(1000, 4, 0, true));
  auto s = p;
  std::sort(s.begin(), s.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(s[i], i);
  SplitMix64 g(0);
  EXPECT_EQ(g.next(), 0xE220A8397B1DCDAFull);  // reference value of splitmix64 seeded with 0
}

TEST(Sampler, EvalSubsetIsSeededDistinctSortedAndSpread) {
  const auto a = ht::data::eval_subset(1000, 40, 7);
  ASSERT_EQ(a.size(), 40u);
  EXPECT_EQ(a, ht::data::eval_subset(1000, 40, 7));
  EXPECT_NE(a, ht::data::eval_subset(1000, 40, 8));
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::adjacent_find(a.begin(), a.end()), a.end());
  // Drawn over the whole range, not its first 40 indices: both halves are represented.
  EXPECT_LT(a.front(), 500);
  EXPECT_GE(a.back(), 500);
  EXPECT_EQ(ht::data::eval_subset(10, 0, 7).size(), 10u);
  EXPECT_EQ(ht::data::eval_subset(10, 20, 7).size(), 10u);
}
