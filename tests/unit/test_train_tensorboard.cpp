// The TensorBoard event writer: CRC-32C known vectors, records byte-identical to what the Python
// protobuf serializer and TensorBoard's own framing produce (expected bytes generated with
// tensorboard 2.21's event_pb2 and masked_crc32c), the file the writer leaves, and (when the Python
// venv of scripts/setup-python.sh exists) TensorBoard's own EventAccumulator reading it back
// through tests/python/tb_read.py.
#include "train/report/tensorboard.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>

#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "support/temp_dir.h"

using namespace ht::train;

namespace {

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_dir() { return ht::test::make_temp_dir("ht_tensorboard_test_"); }

}  // namespace

TEST(TensorBoardCrc, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoardRecord, FileVersionFramedByteExact) {
  EXPECT_EQ(hex(frame_record(encode_file_version_event(1700000000.5))),
            "1800000000000000a37f4b220900002040fc54d9411a0d627261696e2e4576656e743a322b353110");
}

TEST(TensorBoardRecord, ScalarFramedByteExact) {
  EXPECT_EQ(hex(frame_record(encode_scalar_event(1700000000.5, 42, "loss", 2.5f))),
            "1a00000000000000129bd82d0900002040fc54d941102a2a0d0a0b0a046c6f73731500002040d7067853");
}

TEST(TensorBoardRecord, NegativeStepAndZeroValue) {
  // int64 -3 is a 10-byte varint; simple_value 0 is still written (it sits in a oneof).
  EXPECT_EQ(hex(encode_scalar_event(1700000001.25, -3, "z", 0.f)),
            "0900005040fc54d94110fdffffffffffffffff012a0a0a080a017a1500000000");
}

TEST(TensorBoardRecord, TextByteExact) {
  EXPECT_EQ(hex(encode_text_event(1700000002.0, 7, "config", "a = 1")),
            "0900008040fc54d94110072a210a1f0a06636f6e666967420b08071200420561203d20314a080a060a0474657874");
}

TEST(TensorBoardRecord, LongPayloadLengthVarint) {
  const std::string text(300, 'x');  // lengths above 127 need two varint bytes
  const std::string e = encode_text_event(0, 0, "t", text);
  EXPECT_EQ(e.substr(0, 3), std::string("\x2a\xc6\x02", 3));  // Event.summary, length 326
  const std::string r = frame_record(e);
  EXPECT_EQ(r.size(), e.size() + 16);
  EXPECT_EQ(static_cast<unsigned char>(r[0]) | (static_cast<unsigned char>(r[1]) << 8), static_cast<int>(e.size()));
}

TEST(TensorBoardWriter, WritesFramedRecords) {
  const std::string d = temp_dir();
  std::string path;
  {
    TensorBoardWriter w(d, "testhost");
    path = w.path();
    w.scalar("train/loss", 3.25, 1);
    w.text("config", "seed = 1", 0);
    w.flush();
  }
  EXPECT_EQ(path.rfind(d + "/events.out.tfevents.", 0), 0u) << path;
  EXPECT_EQ(path.substr(path.size() - 9), ".testhost");
  const std::string raw = slurp(path);
  // Walk the records, checking both CRCs of each.
  size_t pos = 0;
  int records = 0;
  while (pos < raw.size()) {
    ASSERT_LE(pos + 12, raw.size());
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(raw[pos + i])) << (8 * i);
    uint32_t crc = 0;
    std::memcpy(&crc, raw.data() + pos + 8, 4);
    EXPECT_EQ(crc, masked_crc32c(raw.data() + pos, 8));
    ASSERT_LE(pos + 16 + len, raw.size());
    std::memcpy(&crc, raw.data() + pos + 12 + len, 4);
    EXPECT_EQ(crc, masked_crc32c(raw.data() + pos + 12, len));
    if (records == 0) {
      EXPECT_NE(raw.substr(pos + 12, len).find("brain.Event:2"), std::string::npos);
    }
    pos += 16 + len;
    ++records;
  }
  EXPECT_EQ(records, 3);
}

TEST(TensorBoardWriter, TwoWritersNeverShareAFile) {
  const std::string d = temp_dir();
  TensorBoardWriter a(d, "h"), b(d, "h");
  EXPECT_NE(a.path(), b.path());
}

TEST(TensorBoardWriter, ErrorsNameTheFile) {
  try {
    TensorBoardWriter w("/nonexistent/run", "h");
    ADD_FAILURE() << "no error";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run/events.out.tfevents."), std::string::npos) << e.what();
  }
  EXPECT_THROW(TensorBoardWriter(temp_dir(), "a/b"), ht::Error);
  EXPECT_THROW(TensorBoardWriter(temp_dir(), ""), ht::Error);
}

// TensorBoard's EventAccumulator reads back every scalar (at float32 precision) and the text, and
// the checker fails when one value differs.
TEST(TensorBoardPython, EventAccumulatorReadsScalarsAndText) {
  const char* src = std::getenv("HPCTRAIN_SOURCE_DIR");
  if (src == nullptr) GTEST_SKIP() << "HPCTRAIN_SOURCE_DIR unset (ctest sets it)";
  const std::string d = temp_dir();
  nlohmann::json expected = {{"scalars", {{"train/loss", nlohmann::json::array()}, {"eval/loss", nlohmann::json::array()}}},
                             {"text", {{"config", "[model]\nn_layer = 2  # h\u00e9llo"}}}};
  {
    TensorBoardWriter w(d, "unit");
    w.text("config", expected["text"]["config"].get<std::string>(), 0);
    for (int64_t step = 1; step <= 40; ++step) {
      const double loss = 5.0 * std::exp(-0.05 * static_cast<double>(step)) + 0.1;
      w.scalar("train/loss", loss, step);
      expected["scalars"]["train/loss"].push_back({step, loss});
      if (step % 10 == 0) {
        w.scalar("eval/loss", loss + 0.3, step);
        expected["scalars"]["eval/loss"].push_back({step, loss + 0.3});
      }
    }
  }
  auto run = [&](const nlohmann::json& exp) {
    std::ofstream(d + "/expected.json") << exp.dump();
    const std::string cmd = "bash " + std::string(src) + "/tests/python/with_venv.sh " + src +
                            "/tests/python/tb_read.py " + d + " " + d + "/expected.json";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const int rc = run(expected);
  if (rc == 77) GTEST_SKIP() << "Python venv missing (scripts/setup-python.sh)";
  EXPECT_EQ(rc, 0);
  expected["scalars"]["train/loss"][7][1] = expected["scalars"]["train/loss"][7][1].get<double>() + 1e-3;
  EXPECT_EQ(run(expected), 1);
}
