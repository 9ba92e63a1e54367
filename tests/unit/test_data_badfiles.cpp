// Every bad-file case through read_meta / Loader / describe: each is an ht::Error(kData) whose
// message names the file and the fault. (The same cases run through the real binary under
// mpirun in tests/data_cli.)
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "data/chunk_reader.h"
#include "data/loader.h"
#include "unit/test_data_fixtures.h"

using namespace ht::data;
using fixtures::FakeComm;

namespace {

std::string dir() {
  static const std::string d = fixtures::make_temp_dir();
  return d;
}

std::string fresh_lm(const std::string& name, int64_t train_tokens = 1001) {
  const std::string p = dir() + "/" + name;
  fixtures::write_lm(p, train_tokens, 100);
  return p;
}

// Runs f, expects ht::Error(kData) whose message contains every needle.
template <typename F>
void expect_data_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needles.front() << "'";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

LoaderOptions lm_options() {
  LoaderOptions o;
  o.seq_len = 8;
  o.micro_batch = 4;
  return o;
}

// Reads every micro-batch of one epoch of the file at path.
void read_epoch(const std::string& path, const LoaderOptions& o, ht::comm::Communicator& comm) {
  Loader l(Dataset::open(path), o, comm);
  for (int64_t i = 0; i < l.steps_per_epoch() * o.grad_accum; ++i) l.next();
}

}  // namespace

TEST(DataBadFile, Missing) {
  expect_data_error([] { read_meta(dir() + "/nope.h5"); }, {"nope.h5", "not found"});
}

TEST(DataBadFile, NotHdf5) {
  const std::string p = dir() + "/text.h5";
  std::ofstream(p) << "just some text, not HDF5\n";
  expect_data_error([&] { read_meta(p); }, {p, "not an HDF5 file"});
}

TEST(DataBadFile, Truncated) {
  const std::string p = fresh_lm("truncated.h5", 20000);
  struct stat st {};
  ::stat(p.c_str(), &st);
  ASSERT_EQ(::truncate(p.c_str(), st.st_size / 2), 0);
  expect_data_error([&] { read_epoch(p, lm_options(), *std::make_unique<FakeComm>(0, 1)); }, {p});
}

TEST(DataBadFile, NotADataset) {
  const std::string p = dir() + "/other.h5";
  { ht::io::File f = ht::io::File::create(p); ht::io::write(f.id(), "x", std::vector<float>{1, 2}); }
  expect_data_error([&] { read_meta(p); }, {p, "not an hpctrain dataset"});
}

TEST(DataBadFile, WrongDatasetNames) {
  const std::string p = fresh_lm("names.h5");
  {
    ht::io::File f = ht::io::File::open_rw(p);
    ASSERT_GE(H5Lmove(f.id(), "/train/tokens", f.id(), "/train/tokenz", H5P_DEFAULT, H5P_DEFAULT), 0);
  }
  expect_data_error([&] { read_meta(p); }, {p, "/train/tokens is missing", "/train/tokenz"});
}

TEST(DataBadFile, WrongDtype) {
  const std::string p = fresh_lm("dtype.h5");
  fixtures::replace_dataset(p, "/train/tokens", std::vector<float>(1001, 1.0f));
  expect_data_error([&] { read_meta(p); }, {p, "/train/tokens", "dtype float32"});
  fixtures::replace_dataset(p, "/train/tokens", std::vector<int64_t>(1001, 1));
  expect_data_error([&] { read_meta(p); }, {p, "/train/tokens", "dtype int64", "uint16 or uint32"});
}

TEST(DataBadFile, TwoDimensionalTokens) {
  const std::string p = fresh_lm("twod.h5");
  fixtures::replace_dataset(p, "/train/tokens", std::vector<uint16_t>(1000, 1), {100, 10});
  expect_data_error([&] { read_meta(p); }, {p, "/train/tokens", "2 dimension(s)", "expected 1-D"});
}

TEST(DataBadFile, ZeroTokens) {
  const std::string p = dir() + "/zero.h5";
  fixtures::write_lm(p, 0, 0);
  expect_data_error([&] { read_meta(p); }, {p, "zero tokens"});
}

TEST(DataBadFile, FewerSamplesThanRanks) {
  const std::string p = fresh_lm("few.h5", 17);  // (17 - 1) / 8 = 2 samples
  auto o = lm_options();
  o.micro_batch = 1;
  FakeComm r0(0, 3);
  expect_data_error([&] { Loader l(Dataset::open(p), o, r0); }, {p, "fewer samples than the 3 ranks"});
  FakeComm solo(0, 1);
  o.micro_batch = 4;
  expect_data_error([&] { Loader l(Dataset::open(p), o, solo); }, {p, "fewer samples than one global batch of 4"});
}

TEST(DataBadFile, TokenIdAboveVocabIsFoundInTheDataRead) {
  const std::string p = fresh_lm("vocab.h5");
  std::vector<uint16_t> tokens(1001, 5);
  tokens[500] = 300;  // vocab_size is 258
  tokens[100] = 300;  // twice: one sample (the remainder) is dropped per epoch
  fixtures::replace_dataset(p, "/train/tokens", tokens);
  read_meta(p);  // the header is fine: the fault is in the data
  FakeComm comm(0, 1);
  expect_data_error([&] { read_epoch(p, lm_options(), comm); }, {p, "/train/tokens", "token id 300 >= vocab_size 258"});
  auto sync = lm_options();
  sync.prefetch = 0;
  expect_data_error([&] { read_epoch(p, sync, comm); }, {"token id 300"});
}

TEST(DataBadFile, ModelVocabSmallerThanFile) {
  const std::string p = fresh_lm("model_vocab.h5");
  auto o = lm_options();
  o.model_vocab_size = 100;
  FakeComm comm(0, 1);
  expect_data_error([&] { Loader l(Dataset::open(p), o, comm); }, {p, "exceeds the model's vocab_size 100"});
}

TEST(DataBadFile, LabelOutsideLabelNames) {
  const std::string p = dir() + "/labels.h5";
  fixtures::write_cls(p, 20, 4, 6, 3);
  std::vector<int32_t> labels(20, 1);
  labels[13] = 3;
  fixtures::replace_dataset(p, "/train/labels", labels);
  FakeComm comm(0, 1);
  LoaderOptions o;
  o.micro_batch = 5;
  expect_data_error([&] { read_epoch(p, o, comm); }, {p, "/train/labels", "label 3 in row 13", "outside label_names"});
  expect_data_error([&] { describe(*Dataset::open(p)); }, {p, "/train/labels", "outside label_names"});
}

TEST(DataBadFile, ChecksumMismatchInAChunk) {
  const std::string p = fresh_lm("corrupt.h5", 4001);  // 64-token chunks
  const haddr_t addr = fixtures::chunk_address(p, "/train/tokens", 1000);  // chunk of rows 960..1023
  ASSERT_NE(addr, HADDR_UNDEF);
  fixtures::flip_byte(p, addr + 10);
  // HDF5's own Fletcher32 filter rejects the chunk too (our reader agrees with it).
  {
    ht::io::File f = ht::io::File::open_read(p);
    EXPECT_THROW(ht::io::read<uint16_t>(f.id(), "/train/tokens"), ht::Error);
  }
  read_meta(p);
  FakeComm comm(0, 1);
  expect_data_error([&] { read_epoch(p, lm_options(), comm); },
                    {"checksum mismatch in " + p + ":/train/tokens rows 960..1023"});
  expect_data_error([&] { describe(*Dataset::open(p)); }, {"checksum mismatch", "rows 960..1023"});
}

TEST(DataBadFile, Fletcher32MatchesHdf5OnIntactFiles) {
  const std::string p = fresh_lm("intact.h5", 5000);
  EXPECT_NE(describe(*Dataset::open(p)).find("checksums ok"), std::string::npos);
  uint8_t bytes[5] = {1, 2, 3, 4, 5};
  // words 0x0102, 0x0304: sum1 = 0x0406, sum2 = 0x0102 + 0x0406 = 0x0508
  EXPECT_EQ(fletcher32(bytes, 4), 0x05080406u);
}
