#include "checkpoint/wire.h"

#include <cstring>

#include "core/error.h"

namespace ht::checkpoint::detail {
namespace {

class Encoder {
 public:
  void i64(int64_t v) { buf_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void f64(double v) { buf_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void str(const std::string& s) { i64(static_cast<int64_t>(s.size())); buf_.append(s); }
  const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

class Decoder {
 public:
  explicit Decoder(const std::string& b) : b_(b) {}
  int64_t i64() { int64_t v; take(&v, sizeof(v)); return v; }
  double f64() { double v; take(&v, sizeof(v)); return v; }
  std::string str() {
    const auto n = static_cast<size_t>(i64());
    HT_REQUIRE(pos_ + n <= b_.size(), ExitCode::kRuntime, "checkpoint broadcast: truncated message");
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  void take(void* out, size_t n) {
    HT_REQUIRE(pos_ + n <= b_.size(), ExitCode::kRuntime, "checkpoint broadcast: truncated message");
    std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
  }
  const std::string& b_;
  size_t pos_ = 0;
};

std::string encode_header(const TensorMap& m) {
  Encoder e;
  e.i64(static_cast<int64_t>(m.size()));
  for (const auto& [k, t] : m) {
    e.str(k);
    e.i64(static_cast<int64_t>(t.scalar_type()));
    e.i64(t.dim());
    for (int64_t d : t.sizes()) e.i64(d);
  }
  return e.bytes();
}

TensorMap allocate_from_header(const std::string& header) {
  Decoder d(header);
  TensorMap m;
  const int64_t n = d.i64();
  for (int64_t i = 0; i < n; ++i) {
    std::string key = d.str();
    const auto dtype = static_cast<torch::ScalarType>(d.i64());
    std::vector<int64_t> shape(static_cast<size_t>(d.i64()));
    for (auto& s : shape) s = d.i64();
    m[key] = torch::empty(shape, torch::TensorOptions().dtype(dtype));
  }
  return m;
}

}  // namespace

TensorMap normalized(const TensorMap& m) {
  TensorMap out;
  for (const auto& [k, t] : m) {
    HT_REQUIRE(t.defined(), ExitCode::kData, "checkpoint tensor '{}' is undefined", k);
    out[k] = t.detach().to(torch::kCPU).contiguous();
  }
  return out;
}

void broadcast_tensors(comm::Communicator& comm, TensorMap& m, int root) {
  if (comm.size() == 1) return;
  const std::string header = comm.broadcast_string(comm.rank() == root ? encode_header(m) : std::string(), root);
  if (comm.rank() != root) m = allocate_from_header(header);
  for (auto& [k, t] : m)
    if (t.nbytes() > 0) comm.broadcast(t.data_ptr(), t.nbytes(), root);
}

void send_tensors(comm::Communicator& comm, const TensorMap& m, int dest) {
  comm.send_string(encode_header(m), dest);
  for (const auto& [k, t] : m)
    if (t.nbytes() > 0) comm.send(t.data_ptr(), t.nbytes(), dest);
}

TensorMap recv_tensors(comm::Communicator& comm, int src) {
  TensorMap m = allocate_from_header(comm.recv_string(src));
  for (auto& [k, t] : m)
    if (t.nbytes() > 0) comm.recv(t.data_ptr(), t.nbytes(), src);
  return m;
}

std::vector<TensorMap> gather_to_root(comm::Communicator& comm, const TensorMap& mine) {
  if (comm.rank() != 0) {
    send_tensors(comm, normalized(mine), 0);
    return {};
  }
  std::vector<TensorMap> all(static_cast<size_t>(comm.size()));
  all[0] = normalized(mine);
  for (int r = 1; r < comm.size(); ++r) all[static_cast<size_t>(r)] = recv_tensors(comm, r);
  return all;
}

void broadcast_scalars(comm::Communicator& comm, Snapshot& s, int root) {
  if (comm.size() == 1) return;
  Encoder e;
  if (comm.rank() == root) {
    e.i64(s.world_size);
    e.i64(s.step);
    e.str(s.path);
    e.str(s.run_id);
    e.f64(s.train_seconds);
    e.i64(static_cast<int64_t>(s.ints.size()));
    for (const auto& [k, v] : s.ints) { e.str(k); e.i64(v); }
    e.i64(static_cast<int64_t>(s.reals.size()));
    for (const auto& [k, v] : s.reals) { e.str(k); e.f64(v); }
    e.i64(static_cast<int64_t>(s.strings.size()));
    for (const auto& [k, v] : s.strings) { e.str(k); e.str(v); }
  }
  const std::string msg = comm.broadcast_string(e.bytes(), root);
  if (comm.rank() == root) return;
  Decoder d(msg);
  s.world_size = d.i64();
  s.step = d.i64();
  s.path = d.str();
  s.run_id = d.str();
  s.train_seconds = d.f64();
  for (int64_t i = 0, n = d.i64(); i < n; ++i) { std::string k = d.str(); s.ints[k] = d.i64(); }
  for (int64_t i = 0, n = d.i64(); i < n; ++i) { std::string k = d.str(); s.reals[k] = d.f64(); }
  for (int64_t i = 0, n = d.i64(); i < n; ++i) { std::string k = d.str(); s.strings[k] = d.str(); }
}

}  // namespace ht::checkpoint::detail
