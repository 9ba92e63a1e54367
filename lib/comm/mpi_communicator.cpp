// MPI and single-process implementations of comm::Communicator.
#include <mpi.h>
#include <unistd.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support()
#endif

#include <climits>
#include <cstring>

#include "comm/communicator.h"
#include "comm/mpi_check.h"
#include "core/error.h"
#include "core/log.h"

namespace ht::comm {

size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF64: case DType::kI64: case DType::kU64: return 8;
    case DType::kU8: return 1;
    case DType::kBF16: case DType::kF16: return 2;
  }
  return 0;
}

std::string Communicator::broadcast_string(const std::string& s, int root) {
  int64_t n = static_cast<int64_t>(s.size());
  broadcast(&n, sizeof(n), root);
  std::string out = rank() == root ? s : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) broadcast(out.data(), static_cast<size_t>(n), root);
  return out;
}

void Communicator::send_string(const std::string& s, int dest) {
  const int64_t n = static_cast<int64_t>(s.size());
  send(&n, sizeof(n), dest);
  if (n > 0) send(s.data(), s.size(), dest);
}

std::string Communicator::recv_string(int src) {
  int64_t n = 0;
  recv(&n, sizeof(n), src);
  HT_REQUIRE(n >= 0, ExitCode::kRuntime, "recv_string from rank {}: negative length {}", src, n);
  std::string out(static_cast<size_t>(n), '\0');
  if (n > 0) recv(out.data(), out.size(), src);
  return out;
}

namespace {

// A request that completed when it was created (blocking fallbacks, single process).
class DoneRequest final : public Request {
 public:
  bool test() override { return true; }
  void wait() override {}
};

}  // namespace

std::unique_ptr<Request> Communicator::iallreduce(void* buf, size_t count, DType t, ReduceOp op) {
  allreduce(buf, count, t, op);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> Communicator::iallgather(const void* send, void* recv, size_t bytes_per_rank) {
  allgather(send, recv, bytes_per_rank);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> Communicator::ireduce_scatter(const float* send, float* recv, size_t count) {
  reduce_scatter(send, recv, count);
  return std::make_unique<DoneRequest>();
}

void Communicator::alltoall(const void* send, void* recv, size_t bytes_per_rank) {
  HT_REQUIRE(size() == 1, ExitCode::kRuntime, "alltoall is not implemented by this communicator");
  if (send != recv) std::memmove(recv, send, bytes_per_rank);
}

std::unique_ptr<Request> Communicator::ialltoall(const void* send, void* recv, size_t bytes_per_rank) {
  alltoall(send, recv, bytes_per_rank);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> Communicator::iexchange(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                                                 int) {
  HT_REQUIRE(sends.empty() && recvs.empty(), ExitCode::kRuntime,
             "iexchange with peers is not implemented by this communicator");
  return std::make_unique<DoneRequest>();
}

namespace {

// One or more MPI requests (a chunked count gives several) completed together.
class MpiRequest final : public Request {
 public:
  explicit MpiRequest(int rank) : rank_(rank) {}
  ~MpiRequest() override {
    if (done_ || reqs_.empty()) return;
    int rc = MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) HT_ERROR("MPI_Waitall in ~MpiRequest failed on rank {} (rc {})", rank_, rc);
  }
  std::vector<MPI_Request> reqs_;
  bool test() override {
    if (done_) return true;
    int flag = 0;
    HT_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    done_ = flag != 0;
    return done_;
  }
  void wait() override {
    if (done_) return;
    HT_MPI_CHECK(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE));
    done_ = true;
  }

 private:
  int rank_;
  bool done_ = false;
};

MPI_Datatype to_mpi(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kU64: return MPI_UINT64_T;
    case DType::kU8: return MPI_UINT8_T;
    case DType::kBF16: case DType::kF16: return MPI_UINT16_T;  // only for broadcast/gather; reductions go through comm/ averaging
  }
  return MPI_BYTE;
}

MPI_Op to_mpi(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_SUM;
}

constexpr size_t kMaxChunk = static_cast<size_t>(INT_MAX);
constexpr int kP2pTag = 7001;
constexpr int kExchangeTagBase = 8000;  // iexchange tags: [8000, 32000): above kP2pTag, below MPI_TAG_UB >= 32767
constexpr int kMaxExchangeTag = 24000;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    HT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    HT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    HT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_));
    HT_MPI_CHECK(MPI_Comm_rank(node_, &local_rank_));
    HT_MPI_CHECK(MPI_Comm_size(node_, &local_size_));
    HT_MPI_CHECK(MPI_Allreduce(&rank_, &node_leader_, 1, MPI_INT, MPI_MIN, node_));
    // Errors come back as return codes so that every call site can name itself.
    HT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  }
  ~MpiCommunicator() override {
    MPI_Comm_free(&node_);
    if (owned_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string hostname() const override {
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    return std::string(name, static_cast<size_t>(len));
  }

  void barrier() override { HT_MPI_CHECK(MPI_Barrier(comm_)); }

  void allreduce(void* buf, size_t count, DType t, ReduceOp op) override {
    HT_REQUIRE(t != DType::kBF16 && t != DType::kF16, ExitCode::kRuntime,
               "allreduce on 16-bit floats needs comm::ParamAverager (fp32 accumulation)");
    auto* p = static_cast<char*>(buf);
    const size_t elem = dtype_bytes(t);
    for (size_t done = 0; done < count;) {
      const size_t n = std::min(kMaxChunk, count - done);
      HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * elem, static_cast<int>(n), to_mpi(t), to_mpi(op), comm_));
      done += n;
    }
    bytes_communicated_ += count * elem;
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    auto* p = static_cast<char*>(buf);
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(kMaxChunk, bytes - done);
      HT_MPI_CHECK(MPI_Bcast(p + done, static_cast<int>(n), MPI_BYTE, root, comm_));
      done += n;
    }
    bytes_communicated_ += bytes;
  }

  void send(const void* buf, size_t bytes, int dest) override {
    HT_REQUIRE(dest != rank_ && dest >= 0 && dest < size_, ExitCode::kRuntime, "send to rank {} from rank {} of {}",
               dest, rank_, size_);
    const auto* p = static_cast<const char*>(buf);
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(kMaxChunk, bytes - done);
      HT_MPI_CHECK(MPI_Send(p + done, static_cast<int>(n), MPI_BYTE, dest, kP2pTag, comm_));
      done += n;
    }
    bytes_communicated_ += bytes;
  }

  void recv(void* buf, size_t bytes, int src) override {
    HT_REQUIRE(src != rank_ && src >= 0 && src < size_, ExitCode::kRuntime, "recv from rank {} on rank {} of {}", src,
               rank_, size_);
    auto* p = static_cast<char*>(buf);
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(kMaxChunk, bytes - done);
      MPI_Status st;
      HT_MPI_CHECK(MPI_Recv(p + done, static_cast<int>(n), MPI_BYTE, src, kP2pTag, comm_, &st));
      int got = 0;
      HT_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &got));
      HT_REQUIRE(static_cast<size_t>(got) == n, ExitCode::kRuntime, "recv from rank {}: {} bytes, expected {}", src,
                 got, n);
      done += n;
    }
  }

  void allgather(const void* send, void* recv, size_t bytes_per_rank) override {
    HT_REQUIRE(bytes_per_rank <= kMaxChunk, ExitCode::kRuntime, "allgather of {} bytes per rank exceeds INT_MAX",
               bytes_per_rank);
    const bool in_place = send == static_cast<const char*>(recv) + static_cast<size_t>(rank_) * bytes_per_rank;
    HT_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(bytes_per_rank), MPI_BYTE, recv,
                               static_cast<int>(bytes_per_rank), MPI_BYTE, comm_));
    bytes_communicated_ += bytes_per_rank;
  }

  std::unique_ptr<Request> iallreduce(void* buf, size_t count, DType t, ReduceOp op) override {
    HT_REQUIRE(t != DType::kBF16 && t != DType::kF16, ExitCode::kRuntime,
               "iallreduce on 16-bit floats needs comm::ParamAverager (fp32 accumulation)");
    auto req = std::make_unique<MpiRequest>(rank_);
    auto* p = static_cast<char*>(buf);
    const size_t elem = dtype_bytes(t);
    for (size_t done = 0; done < count;) {
      const size_t n = std::min(kMaxChunk, count - done);
      MPI_Request r = MPI_REQUEST_NULL;
      HT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p + done * elem, static_cast<int>(n), to_mpi(t), to_mpi(op), comm_, &r));
      req->reqs_.push_back(r);
      done += n;
    }
    bytes_communicated_ += count * elem;
    return req;
  }

  void alltoall(const void* send, void* recv, size_t bytes_per_rank) override {
    HT_REQUIRE(bytes_per_rank <= kMaxChunk, ExitCode::kRuntime, "alltoall of {} bytes per rank exceeds INT_MAX",
               bytes_per_rank);
    const int n = static_cast<int>(bytes_per_rank);
    HT_MPI_CHECK(MPI_Alltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_));
    bytes_communicated_ += bytes_per_rank * static_cast<size_t>(size_);
  }

  std::unique_ptr<Request> ialltoall(const void* send, void* recv, size_t bytes_per_rank) override {
    HT_REQUIRE(bytes_per_rank <= kMaxChunk, ExitCode::kRuntime, "ialltoall of {} bytes per rank exceeds INT_MAX",
               bytes_per_rank);
    auto req = std::make_unique<MpiRequest>(rank_);
    const int n = static_cast<int>(bytes_per_rank);
    MPI_Request r = MPI_REQUEST_NULL;
    HT_MPI_CHECK(MPI_Ialltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_, &r));
    req->reqs_.push_back(r);
    bytes_communicated_ += bytes_per_rank * static_cast<size_t>(size_);
    return req;
  }

  std::unique_ptr<Request> iexchange(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                                     int tag) override {
    HT_REQUIRE(tag >= 0 && tag < kMaxExchangeTag, ExitCode::kRuntime, "iexchange tag {} outside [0, {})", tag,
               kMaxExchangeTag);
    auto req = std::make_unique<MpiRequest>(rank_);
    const int mpi_tag = kExchangeTagBase + tag;  // clear of kP2pTag: blocking send/recv never match these
    auto post = [&](const Message& m, bool is_send) {
      HT_REQUIRE(m.peer != rank_ && m.peer >= 0 && m.peer < size_, ExitCode::kRuntime,
                 "iexchange {} rank {} on rank {} of {}", is_send ? "to" : "from", m.peer, rank_, size_);
      auto* p = static_cast<char*>(m.buf);
      for (size_t done = 0; done < m.bytes;) {  // chunks of one message arrive in order (same peer and tag)
        const size_t n = std::min(kMaxChunk, m.bytes - done);
        MPI_Request r = MPI_REQUEST_NULL;
        if (is_send)
          HT_MPI_CHECK(MPI_Isend(p + done, static_cast<int>(n), MPI_BYTE, m.peer, mpi_tag, comm_, &r));
        else
          HT_MPI_CHECK(MPI_Irecv(p + done, static_cast<int>(n), MPI_BYTE, m.peer, mpi_tag, comm_, &r));
        req->reqs_.push_back(r);
        done += n;
      }
    };
    for (const auto& m : recvs) post(m, false);
    for (const auto& m : sends) {
      post(m, true);
      bytes_communicated_ += m.bytes;
    }
    return req;
  }

  std::unique_ptr<Request> iallgather(const void* send, void* recv, size_t bytes_per_rank) override {
    HT_REQUIRE(bytes_per_rank <= kMaxChunk, ExitCode::kRuntime, "iallgather of {} bytes per rank exceeds INT_MAX",
               bytes_per_rank);
    const bool in_place = send == static_cast<const char*>(recv) + static_cast<size_t>(rank_) * bytes_per_rank;
    auto req = std::make_unique<MpiRequest>(rank_);
    MPI_Request r = MPI_REQUEST_NULL;
    HT_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(bytes_per_rank), MPI_BYTE, recv,
                                static_cast<int>(bytes_per_rank), MPI_BYTE, comm_, &r));
    req->reqs_.push_back(r);
    bytes_communicated_ += bytes_per_rank;
    return req;
  }

  void reduce_scatter(const float* send, float* recv, size_t count) override {
    HT_REQUIRE(count <= kMaxChunk, ExitCode::kRuntime, "reduce_scatter of {} values per rank exceeds INT_MAX", count);
    HT_MPI_CHECK(MPI_Reduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), MPI_FLOAT,
                                          MPI_SUM, comm_));
    bytes_communicated_ += count * sizeof(float) * static_cast<size_t>(size_);
  }

  std::unique_ptr<Request> ireduce_scatter(const float* send, float* recv, size_t count) override {
    HT_REQUIRE(count <= kMaxChunk, ExitCode::kRuntime, "ireduce_scatter of {} values per rank exceeds INT_MAX", count);
    auto req = std::make_unique<MpiRequest>(rank_);
    MPI_Request r = MPI_REQUEST_NULL;
    HT_MPI_CHECK(
        MPI_Ireduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                  comm_, &r));
    req->reqs_.push_back(r);
    bytes_communicated_ += count * sizeof(float) * static_cast<size_t>(size_);
    return req;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    HT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    auto out = std::make_unique<MpiCommunicator>(sub);
    out->owned_ = true;
    return out;
  }

  int node_leader() const override { return node_leader_; }

  bool cuda_aware() const override {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#else
    return false;  // built against an MPI without CUDA support (Debian's Open MPI: compile-time 0)
#endif
  }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(comm_, exit_code);
    std::_Exit(exit_code);
  }

 private:
  MPI_Comm comm_;
  MPI_Comm node_ = MPI_COMM_NULL;
  bool owned_ = false;  // made by split(): freed with the communicator
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_leader_ = 0;
};

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string hostname() const override {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    return name;
  }
  void barrier() override {}
  void allreduce(void*, size_t, DType, ReduceOp) override {}
  void broadcast(void*, size_t, int) override {}
  void send(const void*, size_t, int dest) override {
    HT_FAIL(ExitCode::kRuntime, "send to rank {} in a single-process run", dest);
  }
  void recv(void*, size_t, int src) override { HT_FAIL(ExitCode::kRuntime, "recv from rank {} in a single-process run", src); }
  void allgather(const void* send, void* recv, size_t bytes_per_rank) override {
    if (send != recv) std::memmove(recv, send, bytes_per_rank);
  }
  void reduce_scatter(const float* send, float* recv, size_t count) override {
    if (send != recv) std::memmove(recv, send, count * sizeof(float));
  }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<LocalCommunicator>(); }
  int node_leader() const override { return 0; }
  bool cuda_aware() const override { return true; }  // no MPI involved: any pointer is fine
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world() { return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD); }
std::unique_ptr<Communicator> make_local() { return std::make_unique<LocalCommunicator>(); }

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    HT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace ht::comm
