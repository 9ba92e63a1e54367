// Fused averaging of a fixed set of tensors across ranks (parameters, gradients, optimizer
// moments): flatten into one fp32 buffer allocated once, average with one in-place collective
// per bucket (sum, then scale by 1/W), copy back. Exchange in fp32, or encoded (comm/exchange.h:
// bf16/fp16, int8/int4 with per-block scales) with fp32 accumulation: a reduce-scatter through
// alltoall of the encoded chunks, an fp32 sum in rank order, the mean encoded once, an allgather.
// GPU-aware: CUDA tensors go straight to a CUDA-aware MPI, else through a pinned host buffer.
// Also: replica checksums (post-sync consistency check) and broadcast of tensors from a root.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/bit_sum.h"
#include "comm/communicator.h"
#include "comm/exchange.h"

namespace ht::comm {

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
  bool announce = true;       // log the layout at construction (false: a probe that only times the exchange)
  int64_t quant_block = 64;   // int8/int4: values per fp32 scale
  int64_t pad_multiple = 1;   // the flat buffer's length is also a multiple of this (fragments x group slices)
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
  // The same for the elements [begin, end) of the flat layout only (the parts of the tensors that
  // fall there): pack copies them into flat(); unpack writes source (end - begin values, the
  // range's own buffer) into the tensors, or adds it.
  void pack_range(const std::vector<torch::Tensor>& tensors, int64_t begin, int64_t end);
  void unpack_range(const std::vector<torch::Tensor>& tensors, int64_t begin, int64_t end, const torch::Tensor& source,
                    bool add);
  int64_t padded_numel() const { return padded_numel_; }
  // flat() := mean over ranks, blocking. With bit_sum: also sum_of_bits (comm/bit_sum.h) of the
  // whole of flat() afterwards, the checksum's input, added up by the 1/W pass where there is one
  // (fp32 on the host) instead of a second read of the buffer.
  void allreduce_mean(int64_t* bit_sum = nullptr);
  void start_mean();      // begins flat() := mean; flat() must not be touched until wait_mean()
  // Drives progress of a started mean (for an encoded exchange: starts its allgather half once the
  // reduce-scatter half has landed); true when the exchange is done.
  bool test_mean();
  void wait_mean(int64_t* bit_sum = nullptr);  // bit_sum: as for allreduce_mean
  bool pending() const { return !requests_.empty(); }

  // Times the staging buffer carried an exchange (telemetry: proves the staged path ran).
  int64_t staged_transfers() const { return staged_transfers_; }
  // Encoded buckets whose allgather half test_mean() started (telemetry: proves the background path ran).
  int64_t gathers_started_by_test() const { return gathers_started_by_test_; }
  // Narrow flat-buffer slice of tensor i (a view).
  torch::Tensor slice(const torch::Tensor& buf, size_t i) const;
  int64_t numel() const { return total_numel_; }
  uint64_t bytes_per_call() const;  // payload handed to the exchange per average (exchange dtype)
  TransferPath path() const { return path_; }
  size_t num_buckets() const { return buckets_.size(); }

 private:
  struct Bucket { int64_t begin, count; };
  void copy_to_wire();
  void copy_from_wire(bool scale, int64_t* bit_sum = nullptr);
  double pending_scale() const;
  void launch(bool blocking);
  void finish_coded_bucket(size_t i, bool blocking);
  // The wire bytes of the elements [begin, begin + count) (begin and count multiples of the chunk unit).
  torch::Tensor wire_slice(const torch::Tensor& wire, int64_t begin, int64_t count) const;

  Communicator& comm_;
  std::unique_ptr<Communicator> own_comm_;  // non-blocking encoded exchanges: their collectives' own (start_mean)
  Communicator* coll_ = &comm_;             // where the exchange's collectives go: own_comm_ once made, else comm_
  AveragerOptions opts_;
  std::vector<int64_t> numels_, offsets_;
  int64_t total_numel_ = 0, padded_numel_ = 0;
  torch::Device device_{torch::kCPU};
  TransferPath path_ = TransferPath::kHostDirect;
  torch::Tensor flat_;   // fp32, device
  torch::Tensor wire_;   // what MPI sees: fp32 (== flat_ when direct), else the encoded bytes (uint8); host when staged
  torch::Tensor recv_;   // encoded exchanges only: alltoall receive buffer (same shape as wire_)
  torch::Tensor sum_;    // encoded exchanges only: one chunk's rows decoded and added up (fp32, device)
  std::vector<Bucket> buckets_;
  std::vector<std::unique_ptr<Request>> requests_;  // one per bucket once started (fp32: the all-reduce;
                                                   // encoded: the reduce-scatter half)
  std::vector<std::unique_ptr<Request>> gathers_;  // encoded, started without blocking: bucket i's allgather
                                                   // half once test_mean() has started it
  int64_t staged_transfers_ = 0;
  int64_t gathers_started_by_test_ = 0;
};

// 64-bit checksum of the tensors' bits: per tensor the int64 sum of its raw bit patterns and its
// numel, chained with FNV-1a. Any single changed value changes it. Collective-free.
uint64_t checksum(const std::vector<torch::Tensor>& tensors);
// checksum({t}) from t's numel and a bit sum already taken (ParamAverager::allreduce_mean's).
uint64_t checksum_of_bit_sum(int64_t bit_sum, int64_t numel);
// The outer step of comm/bit_sum.h (outer_step_summing_bits) on tensors of one size: g undefined:
// no step; momentum may be undefined when f.momentum is 0; copy undefined: none (it may be g). One
// pass for fp32 contiguous CPU tensors, split over the intra-op threads; the same operations through
// ATen otherwise. bit_sum (optional) receives the bit sum checksum({global}) is made of.
void outer_step(const torch::Tensor& global, const torch::Tensor& momentum, const torch::Tensor& g,
                const torch::Tensor& copy, OuterStepFactors f, int64_t* bit_sum = nullptr);
// Allgathers checksum; throws ht::Error(kRuntime) on every rank, naming the ranks that differ from rank 0.
void verify_replicas_equal(Communicator& comm, uint64_t local_checksum, const std::string& what);
// Copies root's tensors into every rank's tensors (any device; CUDA goes through host memory).
void broadcast_tensors(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root);

}  // namespace ht::comm
