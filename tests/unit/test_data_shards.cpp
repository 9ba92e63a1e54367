// Shards read as one dataset: RowReader across shard boundaries, the Loader over shards against
// the same tokens in one file, glob expansion, and the refusals naming the odd shard. The
// end-to-end checks (real `prepare` under mpirun, training losses) are in tests/shards_cli.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "data/loader.h"
#include "unit/test_data_fixtures.h"

using namespace ht::data;
using fixtures::FakeComm;
using fixtures::kModulo;

namespace {

const std::string& dir() {
  static const std::string d = fixtures::make_temp_dir();
  return d;
}

// A causal-lm shard whose train tokens are i % kModulo (the val split is small and also i % kModulo).
std::string lm_shard(const std::string& name, int64_t train_tokens, hsize_t chunk = 16, int64_t vocab = kByteVocab) {
  const std::string p = dir() + "/" + name;
  fixtures::write_lm(p, train_tokens, 40, chunk, vocab);
  return p;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ht::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<int64_t> flat(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

TEST(DataShards, RowReaderReadsAcrossShardBoundaries) {
  // Shard sizes 37, 5, 100: reads below cross one boundary, two boundaries, or stay inside a shard.
  const std::vector<int64_t> sizes = {37, 5, 100};
  std::vector<std::string> paths;
  std::vector<int64_t> expected;
  for (size_t s = 0; s < sizes.size(); ++s) {
    paths.push_back(lm_shard("rr-" + std::to_string(s) + ".h5", sizes[s]));
    for (int64_t i = 0; i < sizes[s]; ++i) expected.push_back(i % kModulo);
  }
  const auto data = Dataset::open_shards(paths, "data.path");
  EXPECT_EQ(data->num_shards(), 3);
  auto reader = data->reader("/train/tokens", 1 << 20);
  ASSERT_EQ(reader->rows(), 142);
  struct Range { int64_t start, count; };
  for (const Range r : {Range{0, 142}, Range{30, 10}, Range{36, 8}, Range{40, 3}, Range{41, 101}, Range{141, 1},
                        Range{42, 0}}) {
    std::vector<int64_t> got(static_cast<size_t>(r.count), -1);
    reader->read_rows(r.start, r.count, 1, got.data());
    EXPECT_EQ(got, std::vector<int64_t>(expected.begin() + r.start, expected.begin() + r.start + r.count))
        << "rows " << r.start << " + " << r.count;
  }
  std::vector<int64_t> one(2);
  EXPECT_THROW(reader->read_rows(141, 2, 1, one.data()), ht::Error);
}

TEST(DataShards, LoaderOverShardsEqualsOneFileWithTheSameTokens) {
  // Shards of 2 x 251 and 3 x 251 tokens hold exactly the tokens of one 5 x 251-token file
  // (token i is i % 251), so every batch, also those spanning the boundary, must be the same.
  const std::string one = lm_shard("whole.h5", 5 * kModulo, 64);
  const std::vector<std::string> parts = {lm_shard("part-0.h5", 2 * kModulo, 64), lm_shard("part-1.h5", 3 * kModulo, 64)};
  LoaderOptions o;
  o.seq_len = 8;
  o.micro_batch = 4;
  o.seed = 11;
  FakeComm comm(0, 1);
  Loader a(Dataset::open(one), o, comm), b(Dataset::open_shards(parts, "data.path"), o, comm);
  ASSERT_EQ(a.steps_per_epoch(), b.steps_per_epoch());
  bool crossed = false;  // some sample takes tokens from both shards
  for (int64_t k = 0; k < a.steps_per_epoch(); ++k) {
    const Batch x = a.next(), y = b.next();
    EXPECT_EQ(flat(x.sample_ids), flat(y.sample_ids));
    EXPECT_EQ(flat(x.input), flat(y.input));
    EXPECT_EQ(flat(x.target), flat(y.target));
    for (const int64_t id : flat(y.sample_ids))
      crossed |= id * o.seq_len < 2 * kModulo && (id + 1) * o.seq_len + 1 > 2 * kModulo;
  }
  EXPECT_TRUE(crossed) << "no sample spans the shard boundary: the test does not test it";
}

TEST(DataShards, GlobIsSortedAndUnionedWithoutDuplicates) {
  const std::string d = dir() + "/glob";
  ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
  for (const char* n : {"s-2.h5", "s-0.h5", "s-1.h5", "t.h5"}) std::ofstream(d + "/" + n) << "x";
  EXPECT_EQ(expand_shard_paths({d + "/s-*.h5", d + "/s-0.h5"}, "data.path"),
            (std::vector<std::string>{d + "/s-0.h5", d + "/s-1.h5", d + "/s-2.h5"}));
  EXPECT_EQ(expand_shard_paths({d + "/t.h5", d + "/s-1.h5"}, "data.path"),
            (std::vector<std::string>{d + "/s-1.h5", d + "/t.h5"}));
  const std::string nothing = error_of([&] { expand_shard_paths({d + "/u-*.h5"}, "data.path"); });
  EXPECT_NE(nothing.find("data.path: the pattern '" + d + "/u-*.h5' matches no file"), std::string::npos) << nothing;
  const std::string missing = error_of([&] { expand_shard_paths({d + "/t.h5", d + "/v.h5"}, "data.path"); });
  EXPECT_NE(missing.find("data.path: shard " + d + "/v.h5: file not found"), std::string::npos) << missing;
}

TEST(DataShards, ShardsThatDisagreeAreRefusedNamingTheOddOne) {
  const std::string a = lm_shard("agree-a.h5", 100), b = lm_shard("agree-b.h5", 100, 16, 300);
  const std::string msg = error_of([&] { Dataset::open_shards({a, b}, "data.path"); });
  EXPECT_NE(msg.find("data.path"), std::string::npos) << msg;
  EXPECT_NE(msg.find(b), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab"), std::string::npos) << msg;
}
