// The communicator interface: the only door to MPI collectives in the project.
// MpiCommunicator wraps a real MPI communicator; LocalCommunicator is the single-process
// stand-in for tests and -np 1. Counts above INT_MAX are chunked by the implementation.
// Also: non-blocking requests (iallreduce/ialltoall, tagged point-to-point exchanges) and CUDA-aware
// MPI detection.
// Fused parameter averaging over this interface lives in comm/param_averager.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ht::comm {

enum class DType { kF32, kF64, kI32, kI64, kU64, kU8, kBF16, kF16 };
enum class ReduceOp { kSum, kMax, kMin };

size_t dtype_bytes(DType t);

// A pending non-blocking collective. The buffers it was started on must stay alive and untouched
// until wait() (or a true test()) returns. The destructor waits (never throws: logs).
class Request {
 public:
  virtual ~Request() = default;
  // Drives progress; true once complete.
  virtual bool test() = 0;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank and size within this node (from the shared-memory split, not environment guesses).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string hostname() const = 0;

  virtual void barrier() = 0;
  // In place on buf (count elements of type t).
  virtual void allreduce(void* buf, size_t count, DType t, ReduceOp op) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // recv holds size() * bytes_per_rank bytes. send may be recv + rank() * bytes_per_rank (in place).
  virtual void allgather(const void* send, void* recv, size_t bytes_per_rank) = 0;
  virtual std::unique_ptr<Request> iallgather(const void* send, void* recv, size_t bytes_per_rank);
  // Reduce-scatter of fp32 sums (MPI_Reduce_scatter_block): send holds size() * count values,
  // recv receives the sum over ranks of block rank() (count values). send == recv: in place
  // (MPI_IN_PLACE), the input is all of recv and block rank()'s sum lands in its first count values.
  virtual void reduce_scatter(const float* send, float* recv, size_t count) = 0;
  virtual std::unique_ptr<Request> ireduce_scatter(const float* send, float* recv, size_t count);
  // A communicator of the ranks that pass the same color, ordered by key (MPI_Comm_split): the
  // groups of the hierarchical mode and the peers across groups. Collective.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // The lowest rank of this rank's node (the same on every rank of a node): a node's color.
  virtual int node_leader() const = 0;
  // Point-to-point (blocking, byte payloads, one tag): for moving data to or from a single rank
  // (checkpoint gather/scatter) without every rank receiving it. Never to oneself.
  virtual void send(const void* buf, size_t bytes, int dest) = 0;
  virtual void recv(void* buf, size_t bytes, int src) = 0;
  void send_string(const std::string& s, int dest);
  std::string recv_string(int src);
  // Non-blocking in-place all-reduce (MPI_Iallreduce); the default completes it at once.
  virtual std::unique_ptr<Request> iallreduce(void* buf, size_t count, DType t, ReduceOp op);
  // send and recv hold size() * bytes_per_rank bytes; block j of send goes to rank j.
  virtual void alltoall(const void* send, void* recv, size_t bytes_per_rank);
  virtual std::unique_ptr<Request> ialltoall(const void* send, void* recv, size_t bytes_per_rank);
  // Non-blocking point-to-point exchange with one tag: posts every receive, then every send (byte
  // payloads, never to oneself), and returns one request that completes all of them. Unlike
  // collectives, exchanges need not be started in the same order on every rank (messages match by
  // peer and tag), so a caller may start them whenever its data is ready. Tags in [0, 24000).
  struct Message {
    void* buf;
    size_t bytes;
    int peer;
  };
  virtual std::unique_ptr<Request> iexchange(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                                             int tag);
  // True when device (CUDA) pointers may be handed to collectives: MPI built CUDA-aware
  // (mpi-ext.h MPIX_CUDA_AWARE_SUPPORT) and MPIX_Query_cuda_support() says so at run time.
  virtual bool cuda_aware() const { return false; }
  // Ends every rank of the job with this exit code; never returns.
  [[noreturn]] virtual void abort(int exit_code) = 0;

  // Bytes this rank handed to collectives since construction (telemetry).
  uint64_t bytes_communicated() const { return bytes_communicated_; }

  // Typed conveniences.
  double allreduce_sum(double v) { allreduce(&v, 1, DType::kF64, ReduceOp::kSum); return v; }
  int64_t allreduce_sum(int64_t v) { allreduce(&v, 1, DType::kI64, ReduceOp::kSum); return v; }
  int64_t allreduce_max(int64_t v) { allreduce(&v, 1, DType::kI64, ReduceOp::kMax); return v; }
  int64_t allreduce_min(int64_t v) { allreduce(&v, 1, DType::kI64, ReduceOp::kMin); return v; }
  double allreduce_max(double v) { allreduce(&v, 1, DType::kF64, ReduceOp::kMax); return v; }
  bool any(bool v) { return allreduce_max(static_cast<int64_t>(v)) != 0; }
  std::string broadcast_string(const std::string& s, int root);

 protected:
  uint64_t bytes_communicated_ = 0;
};

// MPI_COMM_WORLD-backed communicator; MPI must be initialised (see MpiSession).
std::unique_ptr<Communicator> make_mpi_world();
std::unique_ptr<Communicator> make_local();

// RAII MPI_Init_thread / MPI_Finalize.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace ht::comm
