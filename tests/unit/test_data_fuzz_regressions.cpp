// Regression tests for what scripts/fuzz.sh found in the data module (tests/fuzz/fuzz_tokenizer.cpp,
// fuzz_dataset_meta.cpp): each case replays the structure the fuzzer's input described.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "unit/test_data_fixtures.h"

using namespace ht::data;

namespace {

std::string dir() {
  static const std::string d = fixtures::make_temp_dir();
  return d;
}

// Merge i joins the token of merge i - 1 with itself: token 258 + i is 2^(i+1) bytes of 'a'.
std::vector<Tokenizer::Merge> doubling_merges(int n) {
  std::vector<Tokenizer::Merge> m{{'a', 'a'}};
  for (int i = 1; i < n; ++i) {
    const auto prev = static_cast<uint32_t>(kByteVocab + i - 1);
    m.emplace_back(prev, prev);
  }
  return m;
}

}  // namespace

// fuzz_tokenizer oom-8497d499: a few dozen merges that each join a token with itself describe a
// token of 2^k bytes; from_merges built the string of every token and asked for 1.6 GB (and the
// merge list of a 1 KB dataset file could ask for far more).
TEST(DataFuzzRegression, MergeListDescribingAHugeTokenIsRefused) {
  try {
    Tokenizer::from_merges(doubling_merges(40));
    FAIL() << "from_merges accepted a 2^40-byte token";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("BPE merge 10 (267, 267) makes a token of 2048 bytes"), std::string::npos)
        << e.what();
  }
  // Up to the limit it works, and round-trips.
  const Tokenizer tok = Tokenizer::from_merges(doubling_merges(9));  // longest token: 512 bytes
  const std::string text = std::string(1500, 'a') + " b";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.encode(text).size(), 10u);  // 512 + 512 + 256 + 128 + 64 + 16 + 8 + 4, then " b"
}

TEST(DataFuzzRegression, TrainingNeverCreatesATokenAboveTheLimit) {
  // Long runs of one letter, repeated: unbounded training would merge them into ever longer tokens.
  std::vector<std::string> docs(4, std::string(5000, 'z') + "\n" + std::string(3000, 'y'));
  const Tokenizer tok = Tokenizer::train_bpe(docs, kByteVocab + 40);
  for (int64_t id = kByteVocab; id < tok.vocab_size(); ++id)
    EXPECT_LE(tok.decode(std::vector<int64_t>{id}).size(), kMaxTokenBytes) << id;
  EXPECT_EQ(tok.decode(tok.encode(docs[0])), docs[0]);
  // What training wrote, loading accepts.
  EXPECT_NO_THROW(Tokenizer::from_merges(tok.merges()));
}

// The same through a dataset file: /tokenizer/merges of the doubling kind is refused at load,
// naming the file, instead of exhausting memory.
TEST(DataFuzzRegression, DatasetWithAHugeTokenMergeListIsRefused) {
  const std::string p = dir() + "/bpe_bomb.h5";
  fixtures::write_lm(p, 300, 50, 64, kByteVocab + 40);
  {
    ht::io::File f = ht::io::File::open_rw(p);
    ht::io::set_attr(f.id(), "tokenizer", std::string("bpe"));
    std::vector<uint32_t> flat;
    for (const auto& [a, b] : doubling_merges(40)) { flat.push_back(a); flat.push_back(b); }
    ht::io::write(f.id(), "/tokenizer/merges", flat, {40, 2});
  }
  const auto ds = Dataset::open(p);
  try {
    ds->tokenizer();
    FAIL() << "a 2^40-byte token was accepted";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find(p + ":/tokenizer/merges: BPE merge 10"), std::string::npos) << e.what();
  }
}

// An external link in place of /train/tokens: HDF5 opens the other file's dataset, and the pread
// reader applied that file's chunk addresses to this file's descriptor (wrong bytes: a misleading
// checksum error, or with a file of the same layout, silently wrong tokens).
TEST(DataFuzzRegression, DatasetThroughAnExternalLinkIsRefused) {
  const std::string other = dir() + "/ext_target.h5", p = dir() + "/ext_link.h5";
  fixtures::write_lm(other, 1001, 100);
  fixtures::write_lm(p, 1001, 100);
  {
    ht::io::File f = ht::io::File::open_rw(p);
    ASSERT_GE(H5Ldelete(f.id(), "/train/tokens", H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_external(other.c_str(), "/train/tokens", f.id(), "/train/tokens", H5P_DEFAULT, H5P_DEFAULT), 0);
  }
  try {
    Dataset::open(p);
    FAIL() << "a dataset behind an external link was accepted";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("'/train/tokens' is an external link into another file"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}
