// Checkpoint Manager on one process: round trip of every value kind, rotation, the `latest`
// pointer, fallback on damage, failed saves leaving nothing under a final name, bad input.
#include <dirent.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "io/h5.h"

using ht::checkpoint::Manager;
using ht::checkpoint::Snapshot;

namespace {

// POSIX only: std::filesystem calls can bind to libtorch.so's own copies and crash.
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}
int64_t file_size(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_size : -1;
}
std::string base_name(const std::string& p) { return p.substr(p.rfind('/') + 1); }
void remove_tree(const std::string& p) {
  ::nftw(p.c_str(), [](const char* f, const struct stat*, int, FTW*) { return ::remove(f); }, 16, FTW_DEPTH | FTW_PHYS);
}
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

class CheckpointManager : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ht-ckpt-unit-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/ckpts";
    comm_ = ht::comm::make_local();
  }
  void TearDown() override { remove_tree(root_); }

  std::string root_;
  std::string dir_;
  std::unique_ptr<ht::comm::Communicator> comm_;
};

Snapshot sample(int64_t seed) {
  torch::manual_seed(seed);
  Snapshot s;
  s.tensors["model/blocks.0.attn.qkv.weight"] = torch::randn({12, 4});
  s.tensors["model/wte.weight"] = torch::randn({7, 4});
  s.tensors["optimizer/exp_avg/wte.weight"] = torch::randn({7, 4}, torch::kFloat64);
  s.tensors["misc/i64"] = torch::arange(5, torch::kInt64) * seed;
  s.tensors["misc/i32"] = torch::arange(3, torch::kInt32);
  s.tensors["misc/bf16"] = torch::randn({3, 2}).to(torch::kBFloat16);
  s.tensors["misc/f16"] = torch::randn({5}).to(torch::kHalf);
  s.tensors["misc/bool"] = torch::tensor({true, false, true});
  s.tensors["misc/scalar"] = torch::tensor(3.5);
  s.tensors["misc/empty"] = torch::empty({0, 3});
  s.tensors["misc/noncontig"] = torch::randn({4, 6}).t();
  s.ints["step"] = seed;
  s.ints["loader/epoch"] = -3;
  s.ints["big"] = int64_t{1} << 62;
  s.reals["lr"] = 1.0 / 3.0;
  s.strings["config"] = std::string(100000, 'x') + "\n[model]\nn_layer = 2\n";  // over the 64 KiB attribute limit
  s.per_rank["rng/cpu"] = torch::randint(0, 255, {5056}, torch::kUInt8);
  s.run_id = "test-run";
  s.train_seconds = 123.0 + 1.0 / 7.0;
  return s;
}

void expect_same(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, t] : a) {
    ASSERT_TRUE(b.count(k)) << k;
    const auto& u = b.at(k);
    EXPECT_EQ(t.scalar_type(), u.scalar_type()) << k;
    EXPECT_EQ(t.sizes(), u.sizes()) << k;
    EXPECT_TRUE(torch::equal(t.contiguous(), u.contiguous())) << k;
  }
}

void flip_byte(const std::string& path, std::streamoff pos) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(pos);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(pos);
  f.write(&c, 1);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_F(CheckpointManager, RoundTripKeepsEveryValueKindExactly) {
  Manager m(dir_, 2, *comm_);
  const Snapshot s = sample(7);
  const std::string path = m.save(s, 7);
  EXPECT_EQ(base_name(path), "ckpt-00000007.h5");
  const Snapshot r = m.load(path);
  expect_same(s.tensors, r.tensors);
  expect_same(s.per_rank, r.per_rank);
  EXPECT_EQ(s.ints, r.ints);
  EXPECT_EQ(s.reals, r.reals);  // bit-exact double
  EXPECT_EQ(s.strings, r.strings);
  EXPECT_EQ(r.train_seconds, s.train_seconds);  // the root attribute, bit-exact
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.path, path);
  EXPECT_EQ(r.tensors.at("misc/scalar").dim(), 0);
}

TEST_F(CheckpointManager, LayoutIsPlainHdf5WithChecksumsAndProvenance) {
  Manager m(dir_, 2, *comm_);
  const std::string path = m.save(sample(3), 3);
  auto f = ht::io::File::open_read(path);
  EXPECT_EQ(ht::io::attr_string(f.id(), "format"), "hpctrain-checkpoint");
  EXPECT_EQ(ht::io::attr_int(f.id(), "format_version"), 1);
  EXPECT_EQ(ht::io::attr_int(f.id(), "world_size"), 1);
  EXPECT_EQ(ht::io::attr_int(f.id(), "step"), 3);
  EXPECT_EQ(ht::io::attr_string(f.id(), "hpctrain_version"), HPCTRAIN_VERSION);
  EXPECT_FALSE(ht::io::attr_string(f.id(), "torch_version").empty());
  EXPECT_EQ(ht::io::attr_string(f.id(), "time").size(), 20u);  // 2026-12-02T10:00:00Z
  for (const char* ds : {"model/blocks.0.attn.qkv.weight", "state/step", "state/loader/epoch", "config",
                         "rank/0/rng/cpu", "misc/scalar"}) {
    const auto i = ht::io::info(f.id(), ds);
    EXPECT_TRUE(i.has_fletcher32) << ds;
  }
  EXPECT_EQ(ht::io::info(f.id(), "model/blocks.0.attn.qkv.weight").dims, (std::vector<ht::io::Size>{12, 4}));
  EXPECT_EQ(ht::io::read<int64_t>(f.id(), "state/step"), (std::vector<int64_t>{3}));
  EXPECT_EQ(ht::io::read_string(f.id(), "config").size(), 100000u + 21u);
}

TEST_F(CheckpointManager, RotationKeepsNewestKAndLatestPointsToNewest) {
  Manager m(dir_, 3, *comm_);
  for (int64_t step : {2, 4, 6, 8, 10}) m.save(sample(step), step);
  const auto files = ht::checkpoint::list_checkpoints(dir_);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(base_name(files[0]), "ckpt-00000010.h5");
  EXPECT_EQ(base_name(files[2]), "ckpt-00000006.h5");
  EXPECT_EQ(slurp(dir_ + "/latest"), "ckpt-00000010.h5\n");
  for (const auto& e : entries(dir_)) EXPECT_EQ(e.find(".tmp"), std::string::npos) << e;
  auto latest = m.load_latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 10);
  EXPECT_EQ(latest->ints.at("step"), 10);
}

// Rotation deletes only earlier files of its own run: another run's files (a fresh run in an old
// directory) and files with a higher step of its own run (left behind when it resumed from an
// earlier checkpoint, e.g. after falling back from a damaged one) stay.
TEST_F(CheckpointManager, RotationDeletesOnlyEarlierFilesOfItsOwnRun) {
  Manager m(dir_, 2, *comm_);
  auto of_run = [](int64_t step, const std::string& run) {
    Snapshot s = sample(step);
    s.run_id = run;
    return s;
  };
  m.save(of_run(20, "old"), 20);
  m.save(of_run(30, "old"), 30);
  m.save(of_run(5, "new"), 5);  // a fresh run in an old directory
  EXPECT_TRUE(exists(dir_ + "/ckpt-00000005.h5"));
  EXPECT_EQ(slurp(dir_ + "/latest"), "ckpt-00000005.h5\n");
  m.save(of_run(6, "new"), 6);
  m.save(of_run(7, "new"), 7);
  EXPECT_FALSE(exists(dir_ + "/ckpt-00000005.h5"));  // the new run's own oldest file rotated out
  for (const char* f : {"ckpt-00000006.h5", "ckpt-00000007.h5", "ckpt-00000020.h5", "ckpt-00000030.h5"})
    EXPECT_TRUE(exists(dir_ + "/" + f)) << f;
  m.save(of_run(8, "old"), 8);  // the old run resumed from an earlier step: 20 and 30 are above it
  EXPECT_TRUE(exists(dir_ + "/ckpt-00000020.h5"));
  EXPECT_TRUE(exists(dir_ + "/ckpt-00000030.h5"));
  EXPECT_EQ(slurp(dir_ + "/latest"), "ckpt-00000008.h5\n");
}

TEST_F(CheckpointManager, MissingDirectoryMeansNoCheckpoint) {
  Manager m(dir_ + "/nothing-here", 2, *comm_);
  EXPECT_FALSE(m.load_latest().has_value());
}

TEST_F(CheckpointManager, FlippedByteFallsBackToThePreviousCheckpoint) {
  Manager m(dir_, 2, *comm_);
  m.save(sample(1), 1);
  const std::string newest = m.save(sample(2), 2);
  flip_byte(newest, static_cast<std::streamoff>(file_size(newest) / 2));
  EXPECT_FALSE(ht::checkpoint::verify(newest).ok);
  testing::internal::CaptureStderr();
  auto s = m.load_latest();
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 1);
  EXPECT_NE(err.find("is damaged"), std::string::npos) << err;
  EXPECT_NE(err.find("falling back to"), std::string::npos) << err;
  EXPECT_THROW(m.load(newest), ht::Error);
}

TEST_F(CheckpointManager, TruncatedOrMissingLatestTargetFallsBack) {
  Manager m(dir_, 3, *comm_);
  m.save(sample(1), 1);
  const std::string second = m.save(sample(2), 2);
  const std::string third = m.save(sample(3), 3);
  ASSERT_EQ(::truncate(third.c_str(), file_size(third) / 3), 0);
  auto s = m.load_latest();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 2);
  ::unlink(third.c_str());  // `latest` now names a missing file
  s = m.load_latest();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 2);
}

TEST_F(CheckpointManager, AllDamagedIsAnErrorNotAFreshStart) {
  Manager m(dir_, 2, *comm_);
  for (int64_t step : {1, 2}) {
    const std::string p = m.save(sample(step), step);
    flip_byte(p, static_cast<std::streamoff>(file_size(p) / 2));
  }
  try {
    m.load_latest();
    FAIL() << "expected an error";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("no valid checkpoint"), std::string::npos) << e.what();
  }
}

// Any single damaged byte is either detected or harmless: never silently different state.
TEST_F(CheckpointManager, NoSingleByteFlipGoesUnnoticed) {
  Manager m(dir_, 2, *comm_);
  Snapshot s = sample(4);
  s.strings["config"] = "[model]\nn_layer = 2\n";
  const std::string path = m.save(s, 4);
  const std::string pristine = slurp(path);
  const Snapshot ref = ht::checkpoint::read_file(path);
  int detected = 0, harmless = 0;
  const size_t n = pristine.size();
  for (size_t pos = 0; pos < n; pos += std::max<size_t>(1, n / 400)) {
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << pristine; }
    flip_byte(path, static_cast<std::streamoff>(pos));
    try {
      const Snapshot r = ht::checkpoint::read_file(path);
      expect_same(ref.tensors, r.tensors);
      expect_same(ref.per_rank, r.per_rank);
      EXPECT_EQ(ref.ints, r.ints) << "byte " << pos;
      EXPECT_EQ(ref.reals, r.reals) << "byte " << pos;
      EXPECT_EQ(ref.strings, r.strings) << "byte " << pos;
      ++harmless;
    } catch (const ht::Error&) {
      ++detected;
    }
    if (HasFailure()) { ADD_FAILURE() << "undetected change at byte " << pos << " of " << n; break; }
  }
  std::printf("single-byte flips: %d detected, %d harmless\n", detected, harmless);
  RecordProperty("detected", detected);
  RecordProperty("harmless", harmless);
  EXPECT_GT(detected, harmless);
}

TEST_F(CheckpointManager, FailedSaveLeavesNothingUnderAFinalNameAndKeepsThePrevious) {
  Manager m(dir_, 2, *comm_);
  m.save(sample(1), 1);
  const std::string latest_before = slurp(dir_ + "/latest");
  Snapshot big = sample(2);
  big.tensors["model/huge"] = torch::randn({1 << 20});  // 4 MiB
  // A full disk, simulated: the file size limit makes write(2) fail with EFBIG.
  struct rlimit old_limit {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 1 << 20;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    m.save(big, 2);
  } catch (const ht::Error& e) {
    threw = true;
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_FALSE(exists(dir_ + "/ckpt-00000002.h5"));
  EXPECT_FALSE(exists(dir_ + "/ckpt-00000002.h5.tmp"));
  EXPECT_EQ(slurp(dir_ + "/latest"), latest_before);
  auto s = m.load_latest();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 1);
}

TEST_F(CheckpointManager, UnwritableDirectoryIsAClearDataError) {
  std::ofstream(root_ + "/a-file") << "x";
  Manager m(root_ + "/a-file/ckpts", 2, *comm_);
  try {
    m.save(sample(1), 1);
    FAIL() << "expected an error";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("a-file/ckpts"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointManager, StaleTmpFromACrashedSaveIsIgnoredAndCleaned) {
  Manager m(dir_, 2, *comm_);
  m.save(sample(1), 1);
  std::ofstream(dir_ + "/ckpt-00000002.h5.tmp") << "half a file";
  auto s = m.load_latest();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 1);
  m.save(sample(3), 3);
  EXPECT_FALSE(exists(dir_ + "/ckpt-00000002.h5.tmp"));
}

TEST_F(CheckpointManager, NewerFormatVersionIsRejectedWithTheReason) {
  Manager m(dir_, 2, *comm_);
  const std::string path = m.save(sample(1), 1);
  {
    auto f = ht::io::File::open_rw(path);
    ht::io::set_attr(f.id(), "format_version", int64_t{2});
  }
  try {
    m.load(path);
    FAIL() << "expected an error";
  } catch (const ht::Error& e) {
    EXPECT_NE(std::string(e.what()).find("format_version 2"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointManager, ReservedKeysAndNotHdf5FilesAreRejected) {
  Manager m(dir_, 2, *comm_);
  Snapshot s;
  s.tensors["state/x"] = torch::zeros({1});
  EXPECT_THROW(m.save(s, 1), ht::Error);
  EXPECT_TRUE(ht::checkpoint::list_checkpoints(dir_).empty());
  std::ofstream(dir_ + "/ckpt-00000009.h5") << "not hdf5";
  EXPECT_THROW(m.load(dir_ + "/ckpt-00000009.h5"), ht::Error);
  EXPECT_FALSE(ht::checkpoint::verify(dir_ + "/ckpt-00000009.h5").ok);
}

TEST_F(CheckpointManager, CompatibilityCheckNamesTheFirstMismatchingParameter) {
  Snapshot f;
  f.path = "x.h5";
  f.tensors["model/a.weight"] = torch::zeros({2, 3});
  f.tensors["model/b.weight"] = torch::zeros({4});
  std::map<std::string, torch::Tensor> model{{"a.weight", torch::zeros({2, 3})}, {"b.weight", torch::zeros({4})}};
  auto want = [&] {
    ht::checkpoint::Expectation e;
    e.params = model;
    return e;
  };
  EXPECT_NO_THROW(ht::checkpoint::check_compatible(f, want()));
  model["b.weight"] = torch::zeros({5});
  try {
    ht::checkpoint::check_compatible(f, want());
    FAIL();
  } catch (const ht::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b.weight' has shape [4] in the checkpoint but [5]"), std::string::npos)
        << e.what();
  }
  model.erase("b.weight");
  model["c.bias"] = torch::zeros({1});
  model["b.weight"] = torch::zeros({4});
  try {
    ht::checkpoint::check_compatible(f, want());
    FAIL();
  } catch (const ht::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no parameter 'c.bias'"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointManager, DescribeShowsTheTableAndTheChecksumVerdict) {
  Manager m(dir_, 2, *comm_);
  const std::string path = m.save(sample(5), 5);
  bool ok = false;
  std::string text = ht::checkpoint::describe(path, &ok);
  EXPECT_TRUE(ok);
  EXPECT_NE(text.find("step 5"), std::string::npos) << text;
  EXPECT_NE(text.find("blocks.0.attn.qkv.weight"), std::string::npos) << text;
  EXPECT_NE(text.find("[12, 4]"), std::string::npos) << text;
  EXPECT_NE(text.find("n_layer = 2"), std::string::npos) << text;
  EXPECT_NE(text.find("rng/cpu [5056] Byte"), std::string::npos) << text;
  EXPECT_NE(text.find("checksums: OK"), std::string::npos) << text;
  flip_byte(path, static_cast<std::streamoff>(file_size(path) / 2));
  text = ht::checkpoint::describe(path, &ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(text.find("checksums: DAMAGED"), std::string::npos) << text;
}
