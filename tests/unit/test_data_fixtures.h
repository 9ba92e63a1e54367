// Fixture files for the data tests, generated at run time (never committed): small valid
// dataset files with known contents, ways to damage them, and a communicator stand-in of any size.
#pragma once
#include <fcntl.h>
#include <hdf5.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "io/h5.h"
#include "support/temp_dir.h"

namespace ht::data::fixtures {

inline constexpr int64_t kModulo = 251;  // token i of a synthetic file is i % kModulo

inline std::string make_temp_dir() { return ht::test::make_temp_dir("ht_data_test_"); }

inline void write_root(hid_t f, const std::string& task, int64_t vocab) {
  io::set_attr(f, "format", std::string(kFormatName));
  io::set_attr(f, "format_version", kFormatVersion);
  io::set_attr(f, "task", task);
  io::set_attr(f, "vocab_size", vocab);
  io::set_attr(f, "tokenizer", std::string("byte"));
  io::set_attr(f, "pad_id", kPadId);
  io::set_attr(f, "eos_id", kEosId);
}

// A causal-lm file whose token i (in each split) is i % kModulo, in chunks of `chunk` tokens.
inline void write_lm(const std::string& path, int64_t train_tokens, int64_t val_tokens, hsize_t chunk = 64,
                     int64_t vocab = kByteVocab) {
  io::File f = io::File::create(path);
  write_root(f.id(), "causal-lm", vocab);
  io::set_attr(f.id(), "num_tokens", train_tokens + val_tokens);
  const std::pair<const char*, int64_t> splits[] = {{"train", train_tokens}, {"val", val_tokens}};
  for (const auto& [split, n] : splits) {
    std::vector<uint16_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<uint16_t>(i % kModulo);
    io::write(f.id(), split_dataset(split, "tokens"), tokens, {}, chunk);
    io::write(f.id(), split_dataset(split, "doc_offsets"), std::vector<uint64_t>{0, static_cast<uint64_t>(n)});
  }
}

// A classification file: row r has tokens (r + j) % 200 for j < r % width + 1, then pad; label r % labels.
inline void write_cls(const std::string& path, int64_t train_rows, int64_t val_rows, int64_t width,
                      int64_t num_labels) {
  io::File f = io::File::create(path);
  write_root(f.id(), "classification", kByteVocab);
  io::set_attr(f.id(), "seq_len", width);
  std::vector<std::string> names;
  for (int64_t l = 0; l < num_labels; ++l) names.push_back("label" + std::to_string(l));
  io::set_attr(f.id(), "label_names", names);
  const std::pair<const char*, int64_t> splits[] = {{"train", train_rows}, {"val", val_rows}};
  for (const auto& [split, n] : splits) {
    std::vector<uint16_t> ids;
    std::vector<int32_t> labels;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < width; ++j)
        ids.push_back(static_cast<uint16_t>(j <= r % width ? (r + j) % 200 : kPadId));
      labels.push_back(static_cast<int32_t>(r % num_labels));
    }
    io::write(f.id(), split_dataset(split, "input_ids"), ids, {static_cast<hsize_t>(n), static_cast<hsize_t>(width)}, 4);
    io::write(f.id(), split_dataset(split, "labels"), labels, {}, 8);
  }
}

// Replaces dataset `name` of an existing file by `data` with dims (other dtype, shape, ...).
template <typename T>
inline void replace_dataset(const std::string& path, const std::string& name, const std::vector<T>& data,
                            std::vector<hsize_t> dims = {}) {
  io::File f = io::File::open_rw(path);
  H5Ldelete(f.id(), name.c_str(), H5P_DEFAULT);
  io::write(f.id(), name, data, std::move(dims), 16);
}

// Byte offset in the file of the chunk holding row `row` of dataset `name`.
inline haddr_t chunk_address(const std::string& path, const std::string& name, hsize_t row) {
  io::File f = io::File::open_read(path);
  io::Handle ds = io::open_dataset(f.id(), name);
  io::Handle dcpl(H5Dget_create_plist(ds.id()), H5Pclose);
  hsize_t chunk[2] = {1, 1};
  H5Pget_chunk(dcpl.id(), 2, chunk);
  hsize_t offset[2] = {row / chunk[0] * chunk[0], 0};
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  H5Dget_chunk_info_by_coord(ds.id(), offset, &mask, &addr, &size);
  return addr;
}

// Flips one byte on disk at `offset`.
inline void flip_byte(const std::string& path, uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  unsigned char b = 0;
  if (::pread(fd, &b, 1, static_cast<off_t>(offset)) == 1) {
    b ^= 0x5a;
    (void)::pwrite(fd, &b, 1, static_cast<off_t>(offset));
  }
  ::close(fd);
}

// A communicator stand-in of any size for single-process checks of "fewer samples than ranks".
class FakeComm final : public comm::Communicator {
 public:
  FakeComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return rank_; }
  int local_size() const override { return size_; }
  std::string hostname() const override { return "fake"; }
  void barrier() override {}
  void allreduce(void*, size_t, comm::DType, comm::ReduceOp) override {}
  void broadcast(void*, size_t, int) override {}
  void allgather(const void*, void*, size_t) override {}
  void reduce_scatter(const float*, float*, size_t) override {}
  std::unique_ptr<comm::Communicator> split(int, int) override { throw std::logic_error("FakeComm: no split"); }
  int node_leader() const override { return 0; }
  void send(const void*, size_t, int) override { throw std::logic_error("FakeComm: no point-to-point"); }
  void recv(void*, size_t, int) override { throw std::logic_error("FakeComm: no point-to-point"); }
  [[noreturn]] void abort(int code) override { ::_exit(code); }

 private:
  int rank_, size_;
};

}  // namespace ht::data::fixtures
