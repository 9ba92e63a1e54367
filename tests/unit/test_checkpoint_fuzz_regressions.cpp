// Regression tests for what scripts/fuzz.sh found in the checkpoint reader
// (tests/fuzz/fuzz_checkpoint.cpp). The fuzzer's inputs describe HDF5 files through its own
// harness, so each case here writes the same structure directly: a saved checkpoint, then the
// object the fuzzer added, then every reader.
#include <ftw.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <string>

#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "io/h5.h"

using ht::checkpoint::Manager;
using ht::checkpoint::Snapshot;

namespace {

class CheckpointFuzzRegression : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ht-ckpt-fuzzreg-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    comm_ = ht::comm::make_local();
  }
  void TearDown() override {
    ::nftw(dir_.c_str(), [](const char* f, const struct stat*, int, FTW*) { return ::remove(f); }, 16,
           FTW_DEPTH | FTW_PHYS);
  }

  // A valid checkpoint at step `step`, then `edit` applied to it with the HDF5 C API.
  template <typename F>
  std::string saved_then(int64_t step, F&& edit) {
    Manager m(dir_, 2, *comm_);
    Snapshot s;
    s.tensors["model/wte.weight"] = torch::ones({5, 2});
    s.tensors["model/ln.bias"] = torch::zeros({2});
    s.ints["step"] = step;
    s.strings["config"] = "[model]\nn_layer = 1\n";
    s.per_rank["rng/cpu"] = torch::zeros({4}, torch::kUInt8);
    s.run_id = "fuzz-regression";
    const std::string path = m.save(s, step);
    {
      ht::io::File f = ht::io::File::open_rw(path);
      edit(f.id());
    }
    return path;
  }

  // Every reader refuses the file with kData whose message contains `needle`, and none hangs.
  void expect_refused(const std::string& path, const std::string& needle) {
    const auto v = ht::checkpoint::verify(path);
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.message.find(needle), std::string::npos) << v.message;
    try {
      ht::checkpoint::read_file(path);
      ADD_FAILURE() << "read_file accepted " << path;
    } catch (const ht::Error& e) {
      EXPECT_EQ(e.code(), ht::ExitCode::kData);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    bool ok = true;
    const std::string text = ht::checkpoint::describe(path, &ok);
    EXPECT_FALSE(ok);
    EXPECT_NE(text.find(needle), std::string::npos) << text;
  }

  std::string dir_;
  std::unique_ptr<ht::comm::Communicator> comm_;
};

}  // namespace

// fuzz_checkpoint timeout-d4bd9057: a hard link from /model/loop back to /model made the walk over
// the file's objects recurse along model/loop/loop/loop/... until the 30 s timeout (verify,
// inspect, resume and eval all walk it).
TEST_F(CheckpointFuzzRegression, HardLinkCycleIsAFaultNotAnEndlessWalk) {
  const std::string path = saved_then(10, [](hid_t f) {
    ASSERT_GE(H5Lcreate_hard(f, "/model", f, "/model/loop", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused(path, "has 2 names");
  // A cycle through the root group, and a dataset under two names, are the same fault.
  const std::string root = saved_then(11, [](hid_t f) {
    ASSERT_GE(H5Lcreate_hard(f, "/", f, "/state/up", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused(root, "has 2 names");
  const std::string alias = saved_then(12, [](hid_t f) {
    ASSERT_GE(H5Lcreate_hard(f, "/model/wte.weight", f, "/model/alias", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused(alias, "has 2 names");
  // Resume falls back past all three to nothing valid: an error, not a hang and not a fresh start.
  Manager m(dir_, 2, *comm_);
  EXPECT_THROW(m.load_latest(), ht::Error);
}

TEST_F(CheckpointFuzzRegression, SoftAndExternalLinksAndCommittedTypesAreFaults) {
  expect_refused(saved_then(1, [](hid_t f) {
                   ASSERT_GE(H5Lcreate_soft("/does/not/exist", f, "/model/dangling", H5P_DEFAULT, H5P_DEFAULT), 0);
                 }),
                 "'model/dangling' is a soft link");
  expect_refused(saved_then(2, [](hid_t f) {
                   ASSERT_GE(H5Lcreate_soft("/model", f, "/state/model", H5P_DEFAULT, H5P_DEFAULT), 0);
                 }),
                 "'state/model' is a soft link");
  const std::string other = dir_ + "/ckpt-00000001.h5";
  expect_refused(saved_then(3, [&](hid_t f) {
                   ASSERT_GE(H5Lcreate_external(other.c_str(), "/model/wte.weight", f, "/model/ext", H5P_DEFAULT,
                                                H5P_DEFAULT),
                             0);
                 }),
                 "'model/ext' is an external link");
  expect_refused(saved_then(4, [](hid_t f) {
                   ht::io::Handle t(H5Tcopy(H5T_NATIVE_INT32), H5Tclose);
                   ASSERT_GE(H5Tcommit2(f, "/model/type", t.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), 0);
                 }),
                 "neither a group nor a dataset");
}

// Rank groups must be named by the rank in plain decimal: "rank/0099..." with more digits than
// int64 holds threw std::out_of_range from std::stoll (reported as a bare "stoll"), and "rank/01"
// was read as rank 1.
TEST_F(CheckpointFuzzRegression, RankGroupNamesAreCanonicalDecimals) {
  for (const std::string name : {"99999999999999999999999", "01", "1"}) {
    const std::string path = saved_then(20, [&](hid_t f) {
      ht::io::write(f, "rank/" + name + "/rng/cpu", std::vector<uint8_t>{1, 2, 3, 4});
    });
    expect_refused(path, "'rank/" + name + "/rng/cpu' belongs to no rank of a world of 1");
  }
}
