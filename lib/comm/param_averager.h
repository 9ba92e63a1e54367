// Fused averaging of a fixed set of tensors across ranks (parameters, gradients, optimizer
// moments): flatten into one fp32 buffer allocated once, average with one in-place collective
// per bucket (sum, then scale by 1/W), copy back. Exchange in fp32, or in bf16/fp16 with fp32
// accumulation (reduce-scatter through alltoall, fp32 sum, one rounding, allgather).
// GPU-aware: CUDA tensors go straight to a CUDA-aware MPI, else through a pinned host buffer.
// Also: replica checksums (post-sync consistency check) and broadcast of tensors from a root.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ht::comm {

enum class ExchangeDType { kF32, kBF16, kF16 };
std::string to_string(ExchangeDType t);

// How buffers reach MPI: host memory directly, device memory to a CUDA-aware MPI, or a copy
// through a (pinned, when CUDA is available) host staging buffer.
enum class TransferPath { kHostDirect, kCudaAware, kStaged };
std::string to_string(TransferPath p);

// Compile-time view of the MPI library (mpi-ext.h); Communicator::cuda_aware() adds the run-time query.
bool mpi_cuda_aware_compiled();

struct AveragerOptions {
  ExchangeDType dtype = ExchangeDType::kF32;
  int64_t bucket_mb = 0;      // 0 = one bucket holding everything
  bool force_staging = false; // go through the host staging buffer even when not needed (tests)
  std::string name = "params";  // for log lines
};

class ParamAverager {
 public:
  // The layout (numel of each tensor, in order) and device are fixed by `like`; every call later
  // passes tensors with the same numels (the tensor objects themselves may change, e.g. grads).
  // The environment variable HPCTRAIN_COMM_FORCE_STAGING=1 also forces the staging path.
  ParamAverager(Communicator& comm, const std::vector<torch::Tensor>& like, AveragerOptions opts);
  ~ParamAverager();
  ParamAverager(const ParamAverager&) = delete;
  ParamAverager& operator=(const ParamAverager&) = delete;

  // tensors := mean over ranks (pack, one collective per bucket, unpack with the 1/W scale fused).
  // For bound tensors (see bind) pack and unpack are skipped: one collective plus one scaling pass.
  void average(const std::vector<torch::Tensor>& tensors);

  // Flat parameter storage: copies each tensor's values into its slice of flat() and rebinds the
  // tensor (Tensor::set_data, same TensorImpl, so optimizer state keyed by it stays valid) to
  // that slice. Saves one copy of the tensors' memory and the pack/unpack passes of every
  // average. All tensors must be fp32 and on the averager's device; otherwise nothing is bound
  // and false is returned. Whoever later writes flat() writes the tensors: callers that keep
  // their own data in flat() between start_mean() and wait_mean() (overlap, DiLoCo) must not bind.
  // A tensor whose storage is later replaced simply falls back to the copying path; calling bind
  // again moves it back (tensors already bound are skipped, so repeated calls are cheap).
  bool bind(const std::vector<torch::Tensor>& tensors);
  // True when tensor i of `tensors` is a view of its own slice of flat().
  bool is_bound(const torch::Tensor& t, size_t i) const;

  // Lower-level pieces, for callers that transform the flat buffer (DiLoCo, overlap).
  torch::Tensor& flat() { return flat_; }  // fp32 [padded_numel] on the tensors' device
  void pack(const std::vector<torch::Tensor>& tensors);
  // tensors := source (default flat()) slices; add=true: tensors += slices.
  void unpack(const std::vector<torch::Tensor>& tensors, const torch::Tensor& source = {}, bool add = false);
  void allreduce_mean();  // flat() := mean over ranks, blocking
  void start_mean();      // begins flat() := mean; flat() must not be touched until wait_mean()
  bool test_mean();       // drives progress of a started mean; true when the exchange is done
  void wait_mean();
  bool pending() const { return !requests_.empty(); }

  // Narrow flat-buffer slice of tensor i (a view).
  torch::Tensor slice(const torch::Tensor& buf, size_t i) const;
  int64_t numel() const { return total_numel_; }
  uint64_t bytes_per_call() const;  // payload handed to the exchange per average (exchange dtype)
  TransferPath path() const { return path_; }
  size_t num_buckets() const { return buckets_.size(); }

 private:
  struct Bucket { int64_t begin, count; };
  void copy_to_wire();
  void copy_from_wire(bool scale);
  double pending_scale() const;
  void launch(bool blocking);
  void finish_16bit_bucket(const Bucket& b);
  void* wire_ptr(int64_t elem_offset) const;

  Communicator& comm_;
  AveragerOptions opts_;
  std::vector<int64_t> numels_, offsets_;
  int64_t total_numel_ = 0, padded_numel_ = 0;
  torch::Device device_{torch::kCPU};
  TransferPath path_ = TransferPath::kHostDirect;
  torch::Tensor flat_;   // fp32, device
  torch::Tensor wire_;   // what MPI sees: exchange dtype, host when staged (== flat_ for direct fp32)
  torch::Tensor recv_;   // 16-bit only: alltoall receive buffer (same shape as wire_)
  std::vector<Bucket> buckets_;
  std::vector<std::unique_ptr<Request>> requests_;
};

// 64-bit checksum of the tensors' bits: per tensor the int64 sum of its raw bit patterns and its
// numel, chained with FNV-1a. Any single changed value changes it. Collective-free.
uint64_t checksum(const std::vector<torch::Tensor>& tensors);
// Allgathers checksum; throws ht::Error(kRuntime) on every rank, naming the ranks that differ from rank 0.
void verify_replicas_equal(Communicator& comm, uint64_t local_checksum, const std::string& what);
// Copies root's tensors into every rank's tensors (any device; CUDA goes through host memory).
void broadcast_tensors(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root);

}  // namespace ht::comm
