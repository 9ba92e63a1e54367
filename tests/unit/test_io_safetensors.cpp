// The safetensors writer and reader: a round trip, the writer's refusals, every malformed-header
// case the reader must reject with ht::Error(kData) naming the file and the key, and (when the
// Python venv of scripts/setup-python.sh exists) both directions against the real `safetensors`
// library through tests/python/safetensors_check.py.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "support/temp_dir.h"

using namespace ht::io;

namespace {

std::string dir() {
  static const std::string d = ht::test::make_temp_dir("ht_safetensors_test_");
  return d;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A file image: 8-byte length, header text as given (no padding), then data_bytes zero bytes.
std::string image(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xffu);
  return out + header + std::string(data_bytes, '\0');
}

std::string image_with_length(uint64_t header_len, const std::string& rest) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header_len >> (8 * i)) & 0xffu);
  return out + rest;
}

// Parses `bytes`, expects ht::Error(kData) whose message contains the label and every needle.
void expect_rejected(const std::string& bytes, const std::vector<std::string>& needles) {
  try {
    SafeTensorsFile::from_bytes(bytes, "bad.safetensors");
    ADD_FAILURE() << "accepted; expected an error containing '" << needles.front() << "'";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData) << e.what();
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("bad.safetensors: ", 0), 0u) << what;
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << what;
  }
}

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

template <typename T>
std::vector<T> values_of(const SafeTensorsFile& f, const std::string& name) {
  const auto& t = f.at(name);
  std::vector<T> v(t.bytes() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), f.data(t), t.bytes());
  return v;
}

}  // namespace

TEST(SafeTensors, DtypeSizes) {
  EXPECT_EQ(safetensors_dtype_bytes("F32"), 4u);
  EXPECT_EQ(safetensors_dtype_bytes("BF16"), 2u);
  EXPECT_EQ(safetensors_dtype_bytes("I64"), 8u);
  EXPECT_EQ(safetensors_dtype_bytes("U8"), 1u);
  EXPECT_EQ(safetensors_dtype_bytes("F4"), 0u);  // sub-byte: not supported
  EXPECT_EQ(safetensors_dtype_bytes("f32"), 0u);
}

TEST(SafeTensors, RoundTrip) {
  const std::vector<float> a = {-1.f, -0.5f, 0.f, 0.5f, 1.f, 1.5f};
  const std::vector<int64_t> b = {-2, 0, 7, int64_t{1} << 40};
  const std::vector<uint16_t> c = {0x3f80, 0xc020, 0x7f80};  // bf16 bit patterns: 1, -2.5, +inf
  const std::string path = dir() + "/round.safetensors";
  write_safetensors(path,
                    {{"a.weight", "F32", {2, 3}, a.data(), a.size() * 4},
                     {"b", "I64", {4}, b.data(), b.size() * 8},
                     {"empty", "U8", {0, 5}, nullptr, 0},
                     {"c", "BF16", {3}, c.data(), c.size() * 2}},
                    {{"format", "pt"}, {"note", "h\xc3\xa9llo"}});
  EXPECT_FALSE(exists(path + ".tmp"));
  const std::string raw = slurp(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw[8], '{');
  EXPECT_EQ(raw.size(), 8 + n + 24 + 32 + 6);

  const SafeTensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "a.weight");  // offset order = write order
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "h\xc3\xa9llo");
  EXPECT_EQ(f.at("a.weight").dtype, "F32");
  EXPECT_EQ(f.at("a.weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.at("a.weight").numel(), 6u);
  EXPECT_EQ(values_of<float>(f, "a.weight"), a);
  EXPECT_EQ(values_of<int64_t>(f, "b"), b);
  EXPECT_EQ(values_of<uint16_t>(f, "c"), c);
  EXPECT_EQ(f.at("empty").shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(f.at("empty").bytes(), 0u);
  EXPECT_EQ(f.find("nope"), nullptr);
  expect_data_error([&] { f.at("nope"); }, {"round.safetensors", "'nope'"});
}

TEST(SafeTensors, EmptyFileOfTensors) {
  const std::string path = dir() + "/none.safetensors";
  write_safetensors(path, {});
  const SafeTensorsFile f = read_safetensors(path);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST(SafeTensors, WriterRefusesBadViewsAndLeavesNothing) {
  const std::vector<float> x(6, 1.f);
  const std::string path = dir() + "/refused.safetensors";
  expect_data_error([&] { write_safetensors(path, {{"x", "F32", {2, 2}, x.data(), 24}}); },
                    {"refused.safetensors", "'x'", "needs 16 bytes"});
  expect_data_error([&] { write_safetensors(path, {{"x", "F31", {6}, x.data(), 24}}); }, {"'x'", "unknown dtype"});
  expect_data_error([&] { write_safetensors(path, {{"x", "F32", {-1, -6}, x.data(), 24}}); }, {"'x'", "negative"});
  expect_data_error([&] { write_safetensors(path, {{"x", "F32", {6}, x.data(), 24}, {"x", "F32", {6}, x.data(), 24}}); },
                    {"'x'", "twice"});
  expect_data_error([&] { write_safetensors(path, {{"__metadata__", "F32", {6}, x.data(), 24}}); },
                    {"invalid tensor name"});
  expect_data_error([&] { write_safetensors(path, {{"x\xff", "F32", {6}, x.data(), 24}}); },
                    {"refused.safetensors", "header"});
  EXPECT_FALSE(exists(path));
  EXPECT_FALSE(exists(path + ".tmp"));
  const std::string nodir = dir() + "/no/such/dir/m.safetensors";
  expect_data_error([&] { write_safetensors(nodir, {{"x", "F32", {6}, x.data(), 24}}); }, {nodir, "cannot create"});
}

TEST(SafeTensors, ReplacesAnExistingFileWhole) {
  const std::string path = dir() + "/replace.safetensors";
  const std::vector<float> big(1000, 2.f), small = {3.f};
  write_safetensors(path, {{"w", "F32", {1000}, big.data(), 4000}});
  write_safetensors(path, {{"w", "F32", {1}, small.data(), 4}});
  EXPECT_EQ(values_of<float>(read_safetensors(path), "w"), small);
}

TEST(SafeTensors, MissingAndNonRegularFiles) {
  expect_data_error([] { read_safetensors(dir() + "/absent.safetensors"); }, {"absent.safetensors", "cannot open"});
  expect_data_error([] { read_safetensors(dir()); }, {dir(), "not a regular file"});
  const std::string tiny = dir() + "/tiny.safetensors";
  std::ofstream(tiny, std::ios::binary) << "abc";
  expect_data_error([&] { read_safetensors(tiny); }, {"tiny.safetensors", "too short"});
}

TEST(SafeTensorsMalformed, TooShortOrTruncated) {
  expect_rejected("", {"0 bytes", "too short"});
  expect_rejected(std::string(7, '\0'), {"too short"});
  const std::string good = image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  SafeTensorsFile::from_bytes(good, "good");
  expect_rejected(good.substr(0, good.size() - 1), {"tensor 'a'", "run past the data region (7 bytes)"});
  expect_rejected(good.substr(0, 20), {"runs past the end"});
  expect_rejected(good + "x", {"trailing"});
}

TEST(SafeTensorsMalformed, HeaderLength) {
  expect_rejected(image_with_length(100'000'001, std::string(16, ' ')), {"exceeds the limit"});
  expect_rejected(image_with_length(UINT64_MAX, "{}"), {"exceeds the limit"});
  expect_rejected(image_with_length(3, "{}"), {"runs past the end"});
  expect_rejected(image_with_length(0, ""), {"not valid JSON"});
}

TEST(SafeTensorsMalformed, BadJson) {
  expect_rejected(image(R"({"a": )", 0), {"not valid JSON"});
  expect_rejected(image("[1, 2]", 0), {"not an object"});
  expect_rejected(image(std::string("{}\0\0", 4), 0), {"not valid JSON", "NUL"});
  expect_rejected(image(std::string("{\"a\":\0", 6), 0), {"not valid JSON"});
  expect_rejected(image("{\"a\xff\": 1}", 0), {"not valid JSON"});  // invalid UTF-8
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2),
                  {"'a' twice"});
  expect_rejected(image(R"({"a":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]}})", 1), {"'dtype' twice"});
  expect_rejected(image(std::string(100000, '[') + std::string(100000, ']'), 0), {"nests deeper"});
  std::string deep_objects;
  for (int i = 0; i < 20; ++i) deep_objects += "{\"k\":";
  deep_objects += "1" + std::string(20, '}');
  expect_rejected(image(deep_objects, 0), {"nests deeper"});
}

TEST(SafeTensorsMalformed, EntryFields) {
  expect_rejected(image(R"({"a": 3})", 0), {"tensor 'a'", "not a JSON object"});
  expect_rejected(image(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1), {"tensor 'a'", "'dtype' missing"});
  expect_rejected(image(R"({"a":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", 1), {"tensor 'a'", "unknown dtype 'Q8'"});
  expect_rejected(image(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", 1), {"tensor 'a'", "'shape' missing"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1), {"tensor 'a'", "non-negative"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", 1), {"tensor 'a'", "non-negative"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}})", 1),
                  {"tensor 'a'", "below 2^63"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[1]}})", 1), {"tensor 'a'", "'data_offsets' missing"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1), {"tensor 'a'", "[begin, end]"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,-1]}})", 1), {"tensor 'a'", "non-negative"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})", 1), {"tensor 'a'", "end before"});
  expect_rejected(image(R"({"__metadata__":{"k":1}})", 0), {"__metadata__['k']", "not a string"});
  expect_rejected(image(R"({"__metadata__":[]})", 0), {"__metadata__", "not a JSON object"});
}

TEST(SafeTensorsMalformed, OffsetsOutOfRange) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), {"tensor 'a'", "run past the data region (4 bytes)"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]}})", 1),
                  {"tensor 'a'", "run past"});
}

TEST(SafeTensorsMalformed, OverlapAndGap) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                  {"tensor 'b'", "overlaps tensor 'a'"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
                  {"overlaps"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})", 8),
                  {"tensor 'z'", "overlaps tensor 'a'"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
                  {"tensor 'b'", "gap after byte 4"});
  // Zero-sized tensors may share an offset; the JSON order of the entries does not matter.
  SafeTensorsFile::from_bytes(image(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"e1":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"e0":{"dtype":"F64","shape":[3,0],"data_offsets":[4,4]}})", 8),
                              "ok");
}

TEST(SafeTensorsMalformed, ShapeBytesMismatchAndOverflow) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), {"tensor 'a'", "needs 12 bytes", "span 8"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,0]}})", 0),
                  {"tensor 'a'", "overflows 64 bits"});
  expect_rejected(image(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", 0),
                  {"tensor 'a'", "overflows 64 bits"});
  // 2^32 * 2^32 wraps to 0 in 64 bits: must not pass as an empty tensor.
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
                  {"tensor 'a'", "overflows"});
  // A zero dimension makes the others irrelevant: no overflow.
  SafeTensorsFile::from_bytes(image(R"({"a":{"dtype":"F64","shape":[0,9223372036854775807],"data_offsets":[0,0]}})", 0), "ok");
}

// Deterministic pseudo-random corruption of a valid file: every variant parses or throws
// ht::Error(kData), nothing else (run under ASan/UBSan to make this a sanitizer check too).
TEST(SafeTensorsMalformed, CorruptedBytesNeverEscapeAsOtherErrors) {
  const std::vector<float> a(7, 1.5f);
  const std::vector<int32_t> b(3, -4);
  const std::string path = dir() + "/fuzzbase.safetensors";
  write_safetensors(path, {{"a", "F32", {7}, a.data(), 28}, {"bb", "I32", {3}, b.data(), 12}}, {{"k", "v"}});
  const std::string good = slurp(path);
  uint64_t state = 88172645463325252ull;
  auto next = [&] { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; };
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string s = good;
    const int edits = 1 + static_cast<int>(next() % 3);
    for (int e = 0; e < edits; ++e) s[next() % s.size()] = static_cast<char>(next() & 0xff);
    if (next() % 4 == 0) s.resize(next() % s.size());
    try {
      SafeTensorsFile::from_bytes(s, "fuzz");
      ++accepted;
    } catch (const ht::Error& e) {
      ASSERT_EQ(e.code(), ht::ExitCode::kData) << e.what();
    }
  }
  EXPECT_GT(accepted, 0);  // data-byte edits stay valid
}

// Both directions against the Python `safetensors` package (skipped without the venv).
TEST(SafeTensorsPython, InteropBothWays) {
  const char* src = std::getenv("HPCTRAIN_SOURCE_DIR");
  if (src == nullptr) GTEST_SKIP() << "HPCTRAIN_SOURCE_DIR unset (ctest sets it)";
  const std::vector<float> a = {-1.f, -0.5f, 0.f, 0.5f, 1.f, 1.5f};
  const std::vector<int64_t> b = {-2, 0, 7, int64_t{1} << 40};
  const std::vector<uint16_t> h = {0x3c00, 0xc100, 0x7bff};  // f16: 1, -2.5, 65504
  const std::vector<uint8_t> u = {0, 1, 254, 255};
  const std::string ours = dir() + "/ours.safetensors", theirs = dir() + "/theirs.safetensors";
  write_safetensors(ours,
                    {{"a", "F32", {2, 3}, a.data(), 24},
                     {"b", "I64", {4}, b.data(), 32},
                     {"h", "F16", {3}, h.data(), 6},
                     {"u", "U8", {2, 2}, u.data(), 4},
                     {"z", "F32", {0}, nullptr, 0}},
                    {{"format", "np"}});
  const std::string cmd = "bash " + std::string(src) + "/tests/python/with_venv.sh " + src +
                          "/tests/python/safetensors_check.py " + ours + " " + theirs;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "Python venv missing (scripts/setup-python.sh)";
  ASSERT_EQ(WEXITSTATUS(status), 0) << cmd;

  const SafeTensorsFile f = read_safetensors(theirs);
  EXPECT_EQ(f.metadata().at("format"), "np");
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.at("x").shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(values_of<float>(f, "x"), (std::vector<float>{0.f, 0.25f, 0.5f, 0.75f, 1.f, 1.25f}));
  EXPECT_EQ(f.at("y").dtype, "I32");
  EXPECT_EQ(values_of<int32_t>(f, "y"), (std::vector<int32_t>{-5, -4, -3, -2, -1}));
  EXPECT_EQ(values_of<double>(f, "z"), (std::vector<double>{M_PI, M_E}));
  EXPECT_EQ(values_of<uint8_t>(f, "w"), (std::vector<uint8_t>{0, 127, 128, 255}));
  EXPECT_EQ(values_of<uint16_t>(f, "half"), (std::vector<uint16_t>{0x3c00, 0xc100}));
  EXPECT_EQ(f.at("empty").shape, (std::vector<int64_t>{2, 0}));
}
