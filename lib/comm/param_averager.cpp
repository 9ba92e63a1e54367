// Fused, GPU-aware tensor averaging (see param_averager.h for the design).
#include "comm/param_averager.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <cstring>

#if __has_include(<mpi-ext.h>)
#include <mpi.h>
#include <mpi-ext.h>
#endif

#include "comm/agree.h"
#include "comm/bit_sum.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"

namespace ht::comm {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

bool env_forces_staging() {
  const char* v = std::getenv("HPCTRAIN_COMM_FORCE_STAGING");
  return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
}

// Host memory for staging: page-locked when CUDA is present (fast, async-capable copies).
torch::Tensor host_buffer(int64_t n, torch::ScalarType t) {
  auto opts = torch::TensorOptions().dtype(t).device(torch::kCPU);
  if (torch::cuda::is_available()) opts = opts.pinned_memory(true);
  return torch::zeros({n}, opts);
}

// MPI reads device memory behind CUDA's back: queued kernels must have finished.
void sync_if_cuda(const torch::Tensor& t) {
  if (t.is_cuda()) torch::cuda::synchronize(t.device().index());
}

}  // namespace

std::string to_string(TransferPath p) {
  switch (p) {
    case TransferPath::kHostDirect: return "host memory direct to MPI";
    case TransferPath::kCudaAware: return "device memory direct to CUDA-aware MPI";
    case TransferPath::kStaged: return "staged through a host buffer";
  }
  return "?";
}

bool mpi_cuda_aware_compiled() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return true;
#else
  return false;
#endif
}

ParamAverager::ParamAverager(Communicator& comm, const std::vector<torch::Tensor>& like, AveragerOptions opts)
    : comm_(comm), opts_(std::move(opts)) {
  HT_REQUIRE(!like.empty(), ExitCode::kRuntime, "ParamAverager({}): no tensors to average", opts_.name);
  device_ = like.front().device();
  for (const auto& t : like) {
    HT_REQUIRE(t.device() == device_, ExitCode::kRuntime, "ParamAverager({}): tensors on {} and {}", opts_.name,
               device_.str(), t.device().str());
    HT_REQUIRE(t.is_floating_point(), ExitCode::kRuntime, "ParamAverager({}): non-float tensor", opts_.name);
    offsets_.push_back(total_numel_);
    numels_.push_back(t.numel());
    total_numel_ += t.numel();
  }
  const int64_t world = comm_.size();
  // Encoded exchanges split every bucket into W chunks of whole quantization blocks.
  const int64_t unit = world * elems_multiple(opts_.dtype, opts_.quant_block) * std::max<int64_t>(1, opts_.pad_multiple);
  padded_numel_ = (total_numel_ + unit - 1) / unit * unit;

  const bool staged = opts_.force_staging || env_forces_staging() || (device_.is_cuda() && !comm_.cuda_aware());
  path_ = staged ? TransferPath::kStaged : (device_.is_cuda() ? TransferPath::kCudaAware : TransferPath::kHostDirect);

  flat_ = torch::zeros({padded_numel_}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  const bool f32 = opts_.dtype == ExchangeDType::kF32;
  const auto wire_elems = static_cast<int64_t>(wire_bytes(opts_.dtype, padded_numel_, opts_.quant_block));
  if (f32 && !staged) {
    wire_ = flat_;
  } else if (f32) {
    wire_ = host_buffer(padded_numel_, torch::kFloat);
  } else {
    wire_ = staged ? host_buffer(wire_elems, torch::kUInt8)
                   : torch::zeros({wire_elems}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
    recv_ = torch::empty_like(wire_);
  }

  const int64_t wanted = opts_.bucket_mb * kMiB * padded_numel_ / std::max<int64_t>(1, wire_elems);
  const int64_t bucket_elems =
      opts_.bucket_mb <= 0 ? padded_numel_ : std::max(unit, (f32 ? opts_.bucket_mb * kMiB / 4 : wanted) / unit * unit);
  for (int64_t b = 0; b < padded_numel_; b += bucket_elems)
    buckets_.push_back({b, std::min(bucket_elems, padded_numel_ - b)});
  if (!f32) sum_ = torch::empty({buckets_.front().count / world}, flat_.options());

  if (opts_.announce)
    HT_INFO("comm: averaging {} = {} tensors, {} elements, {:.2f} MiB per exchange in {}, {} bucket(s), {}",
            opts_.name, like.size(), total_numel_, static_cast<double>(bytes_per_call()) / kMiB,
            to_string(opts_.dtype), buckets_.size(), to_string(path_));
}

ParamAverager::~ParamAverager() = default;

uint64_t ParamAverager::bytes_per_call() const { return wire_bytes(opts_.dtype, padded_numel_, opts_.quant_block); }

torch::Tensor ParamAverager::slice(const torch::Tensor& buf, size_t i) const {
  return buf.narrow(0, offsets_[i], numels_[i]);
}

bool ParamAverager::is_bound(const torch::Tensor& t, size_t i) const {
  return t.is_contiguous() && t.numel() == numels_[i] &&
         t.data_ptr() == static_cast<void*>(flat_.data_ptr<float>() + offsets_[i]);
}

bool ParamAverager::bind(const std::vector<torch::Tensor>& tensors) {
  HT_REQUIRE(tensors.size() == numels_.size(), ExitCode::kRuntime, "ParamAverager({}): {} tensors, expected {}",
             opts_.name, tensors.size(), numels_.size());
  for (const auto& t : tensors)
    if (t.scalar_type() != torch::kFloat || t.device() != device_) return false;
  torch::NoGradGuard no_grad;
  size_t moved = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (is_bound(tensors[i], i)) continue;
    ++moved;
    auto dst = slice(flat_, i).view(tensors[i].sizes());
    dst.copy_(tensors[i].detach());
    tensors[i].set_data(dst);  // a const method: the handle stays, the storage behind it changes
  }
  if (moved > 0) HT_DEBUG("comm: {}: {} of {} tensors moved into the flat buffer", opts_.name, moved, tensors.size());
  return true;
}

void ParamAverager::pack(const std::vector<torch::Tensor>& tensors) {
  HT_REQUIRE(tensors.size() == numels_.size(), ExitCode::kRuntime, "ParamAverager({}): {} tensors, expected {}",
             opts_.name, tensors.size(), numels_.size());
  HT_REQUIRE(!pending(), ExitCode::kRuntime, "ParamAverager({}): pack while an exchange is pending", opts_.name);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) {
    HT_REQUIRE(tensors[i].numel() == numels_[i], ExitCode::kRuntime,
               "ParamAverager({}): tensor {} has {} elements, expected {}", opts_.name, i, tensors[i].numel(),
               numels_[i]);
    if (!is_bound(tensors[i], i)) slice(flat_, i).copy_(tensors[i].reshape({-1}));
  }
}

void ParamAverager::unpack(const std::vector<torch::Tensor>& tensors, const torch::Tensor& source, bool add) {
  HT_REQUIRE(tensors.size() == numels_.size(), ExitCode::kRuntime, "ParamAverager({}): {} tensors, expected {}",
             opts_.name, tensors.size(), numels_.size());
  const torch::Tensor& src = source.defined() ? source : flat_;
  torch::NoGradGuard no_grad;
  const bool from_flat = src.is_same(flat_);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (from_flat && !add && is_bound(tensors[i], i)) continue;  // already there
    auto s = slice(src, i).view(tensors[i].sizes());
    if (add)
      tensors[i].add_(s);
    else
      tensors[i].copy_(s);
  }
}

namespace {

// Each tensor's overlap with [begin, end): (tensor index, offset in the tensor, offset in the range, count).
template <typename Fn>
void for_each_overlap(const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels, int64_t begin,
                      int64_t end, Fn fn) {
  for (size_t i = 0; i < offsets.size(); ++i) {
    const int64_t a = std::max(begin, offsets[i]), b = std::min(end, offsets[i] + numels[i]);
    if (a < b) fn(i, a - offsets[i], a - begin, b - a);
  }
}

}  // namespace

void ParamAverager::pack_range(const std::vector<torch::Tensor>& tensors, int64_t begin, int64_t end) {
  torch::NoGradGuard no_grad;
  for_each_overlap(offsets_, numels_, begin, end, [&](size_t i, int64_t at, int64_t, int64_t n) {
    if (!is_bound(tensors[i], i)) flat_.narrow(0, offsets_[i] + at, n).copy_(tensors[i].reshape({-1}).narrow(0, at, n));
  });
}

void ParamAverager::unpack_range(const std::vector<torch::Tensor>& tensors, int64_t begin, int64_t end,
                                 const torch::Tensor& source, bool add) {
  torch::NoGradGuard no_grad;
  for_each_overlap(offsets_, numels_, begin, end, [&](size_t i, int64_t at, int64_t from, int64_t n) {
    auto dst = is_bound(tensors[i], i) ? flat_.narrow(0, offsets_[i] + at, n) : tensors[i].view({-1}).narrow(0, at, n);
    const auto src = source.narrow(0, from, n);
    if (add)
      dst.add_(src);
    else if (src.data_ptr() != dst.data_ptr())
      dst.copy_(src);
  });
}

torch::Tensor ParamAverager::wire_slice(const torch::Tensor& wire, int64_t begin, int64_t count) const {
  const auto from = static_cast<int64_t>(wire_bytes(opts_.dtype, begin, opts_.quant_block));
  const auto bytes = static_cast<int64_t>(wire_bytes(opts_.dtype, count, opts_.quant_block));
  return wire.narrow(0, from, bytes);
}

// Encodes each bucket's W chunks (fp32 goes as it is: the staging copy, or nothing).
void ParamAverager::copy_to_wire() {
  sync_if_cuda(flat_);
  if (wire_.is_same(flat_)) return;
  if (path_ == TransferPath::kStaged) ++staged_transfers_;
  if (opts_.dtype == ExchangeDType::kF32) {
    wire_.copy_(flat_);  // device -> host
    return;
  }
  const int64_t world = comm_.size();
  for (const auto& b : buckets_) {
    const int64_t per = b.count / world;
    for (int64_t j = 0; j < world; ++j)
      encode(flat_.narrow(0, b.begin + j * per, per), opts_.dtype, opts_.quant_block,
             wire_slice(wire_, b.begin + j * per, per));
  }
  sync_if_cuda(wire_);
}

// fp32 exchange leaves the sum (scale pending); an encoded exchange already scaled in fp32 before encoding.
double ParamAverager::pending_scale() const {
  return opts_.dtype == ExchangeDType::kF32 && comm_.size() > 1 ? 1.0 / comm_.size() : 1.0;
}

namespace {

// fixed-size chunks of [0, n) on intra-op threads, fn(first, count) -> each chunk's wrap-around
// sum, the sums added in chunk order (the result depends on neither the threads nor the chunking).
template <typename Fn>
int64_t chunked_sum(int64_t n, Fn fn) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint64_t> partial(static_cast<size_t>(chunks), 0);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t first = c * kChunk;
      partial[static_cast<size_t>(c)] = static_cast<uint64_t>(fn(first, std::min(n, first + kChunk) - first));
    }
  });
  uint64_t total = 0;
  for (auto v : partial) total += v;
  return static_cast<int64_t>(total);
}

// Sum of the raw bit patterns (read as signed integers of the element's width) as int64, in one
// read of the memory and without a converted copy.
int64_t raw_bit_sum(const torch::Tensor& t0) {
  auto t = t0.detach().contiguous().reshape({-1});
  if (!t.device().is_cpu()) t = t.cpu();
  const auto* bytes = static_cast<const char*>(t.data_ptr());
  const auto size = t.element_size();
  return chunked_sum(t.numel(), [&](int64_t first, int64_t count) {
    return sum_of_bits(bytes + first * static_cast<int64_t>(size), count, size);
  });
}

}  // namespace

void ParamAverager::copy_from_wire(bool scale, int64_t* bit_sum) {
  if (!wire_.is_same(flat_)) {
    if (opts_.dtype == ExchangeDType::kF32) {
      flat_.copy_(wire_);
    } else {
      // Every chunk holds its encoded mean; each chunk is its own encoding (codes, then scales).
      const int64_t world = comm_.size();
      for (const auto& b : buckets_) {
        const int64_t per = b.count / world;
        for (int64_t j = 0; j < world; ++j)
          decode(wire_slice(wire_, b.begin + j * per, per), opts_.dtype, opts_.quant_block,
                 flat_.narrow(0, b.begin + j * per, per));
      }
    }
  }
  if (scale && pending_scale() != 1.0) {
    if (bit_sum != nullptr && flat_.is_cpu()) {
      auto* data = flat_.data_ptr<float>();
      const auto factor = static_cast<float>(pending_scale());
      *bit_sum = chunked_sum(flat_.numel(), [&](int64_t first, int64_t count) {
        return scale_summing_bits(data + first, count, factor);
      });
      return;
    }
    flat_.mul_(pending_scale());
  }
  if (bit_sum != nullptr) *bit_sum = raw_bit_sum(flat_);
}

// The reduce-scatter half of encoded bucket i is in recv_: chunk j came from rank j. Decode the
// rows, each added onto the sum of those before it (fp32, rank order: one buffer, one pass per row),
// scale, encode the mean once into this rank's chunk, then allgather the chunks (blocking, or
// started and kept in gathers_[i]). Every rank decodes the same bytes afterwards: the replicas
// agree bitwise.
void ParamAverager::finish_coded_bucket(size_t i, bool blocking) {
  const Bucket& b = buckets_[i];
  const int64_t world = comm_.size(), per = b.count / world;
  auto mean = sum_.narrow(0, 0, per);
  for (int64_t j = 0; j < world; ++j)
    decode(wire_slice(recv_, b.begin + j * per, per), opts_.dtype, opts_.quant_block, mean, /*add=*/j > 0);
  mean.mul_(1.0 / static_cast<double>(world));
  const int64_t mine = b.begin + comm_.rank() * per;
  encode(mean, opts_.dtype, opts_.quant_block, wire_slice(wire_, mine, per));
  sync_if_cuda(wire_);
  const auto chunk = wire_slice(wire_, mine, per);
  void* all = wire_slice(wire_, b.begin, b.count).data_ptr();
  const auto bytes = static_cast<size_t>(chunk.numel());
  if (blocking)
    coll_->allgather(chunk.data_ptr(), all, bytes);
  else
    gathers_[i] = coll_->iallgather(chunk.data_ptr(), all, bytes);
}

void ParamAverager::launch(bool blocking) {
  copy_to_wire();
  const bool f32 = opts_.dtype == ExchangeDType::kF32;
  if (!blocking && !f32) {
    gathers_.clear();
    gathers_.resize(buckets_.size());
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    if (f32) {
      void* p = static_cast<float*>(wire_.data_ptr()) + b.begin;
      if (blocking)
        comm_.allreduce(p, static_cast<size_t>(b.count), DType::kF32, ReduceOp::kSum);
      else
        requests_.push_back(comm_.iallreduce(p, static_cast<size_t>(b.count), DType::kF32, ReduceOp::kSum));
      continue;
    }
    const int64_t per = b.count / comm_.size();
    const auto chunk_bytes = static_cast<size_t>(wire_bytes(opts_.dtype, per, opts_.quant_block));
    void* send = wire_slice(wire_, b.begin, b.count).data_ptr();
    void* recv = wire_slice(recv_, b.begin, b.count).data_ptr();
    if (blocking) {
      coll_->alltoall(send, recv, chunk_bytes);
      finish_coded_bucket(i, /*blocking=*/true);
    } else {
      requests_.push_back(coll_->ialltoall(send, recv, chunk_bytes));
    }
  }
}

void ParamAverager::allreduce_mean(int64_t* bit_sum) {
  HT_REQUIRE(!pending(), ExitCode::kRuntime, "ParamAverager({}): exchange already pending", opts_.name);
  launch(true);
  copy_from_wire(true, bit_sum);
}

void ParamAverager::start_mean() {
  HT_REQUIRE(!pending(), ExitCode::kRuntime, "ParamAverager({}): exchange already pending", opts_.name);
  // A non-blocking encoded exchange's collectives go on a communicator of its own (made at its first
  // start, which every rank reaches in the same order): test_mean() starts the allgather half
  // whenever the reduce-scatter half has landed, which differs between ranks, and MPI matches one
  // communicator's collectives in the order each rank starts them; on its own communicator the
  // averager's collectives always start in its bucket order. Blocking-only averagers need none.
  if (!own_comm_ && opts_.dtype != ExchangeDType::kF32 && comm_.size() > 1) {
    own_comm_ = comm_.split(0, comm_.rank());
    coll_ = own_comm_.get();
  }
  launch(false);
  if (requests_.empty()) requests_.push_back(nullptr);  // keep pending() true until wait_mean()
}

// An encoded bucket has two halves: when its reduce-scatter has landed, the allgather of the mean
// starts here, so an exchange that is tested while training goes on (LocalSgd's backward hooks)
// runs both halves in the background instead of leaving the second to wait_mean().
bool ParamAverager::test_mean() {
  if (gathers_.empty()) {  // fp32 (or no buckets): the started requests are the whole exchange
    bool done = true;
    for (auto& r : requests_)
      if (r) done = r->test() && done;
    return done;
  }
  // Allgathers start in bucket order on every rank: none after a bucket whose first half is still out.
  bool done = true, in_order = true;
  for (size_t i = 0; i < gathers_.size(); ++i) {
    if (!gathers_[i]) {
      if (!in_order || !requests_[i]->test()) {
        done = in_order = false;
        continue;
      }
      finish_coded_bucket(i, /*blocking=*/false);
      ++gathers_started_by_test_;
    }
    done = gathers_[i]->test() && done;
  }
  return done;
}

void ParamAverager::wait_mean(int64_t* bit_sum) {
  HT_REQUIRE(pending(), ExitCode::kRuntime, "ParamAverager({}): wait_mean without start_mean", opts_.name);
  if (gathers_.empty()) {
    for (auto& r : requests_)
      if (r) r->wait();
  } else {
    // Non-blocking like those test_mean() may have started on other ranks: MPI does not match a
    // blocking collective with a non-blocking one.
    for (size_t i = 0; i < gathers_.size(); ++i) {
      if (!gathers_[i]) {
        requests_[i]->wait();
        finish_coded_bucket(i, /*blocking=*/false);
      }
      gathers_[i]->wait();
    }
  }
  requests_.clear();
  gathers_.clear();
  copy_from_wire(true, bit_sum);
}

// The 1/W scale is fused into the copy back (one pass over the buffer instead of two).
void ParamAverager::average(const std::vector<torch::Tensor>& tensors) {
  pack(tensors);
  launch(true);
  copy_from_wire(false);
  const double scale = pending_scale();
  if (scale == 1.0) return unpack(tensors);
  torch::NoGradGuard no_grad;
  bool all_bound = true;
  for (size_t i = 0; i < tensors.size() && all_bound; ++i) all_bound = is_bound(tensors[i], i);
  if (all_bound) {
    flat_.narrow(0, 0, total_numel_).mul_(scale);  // the tensors are the buffer: one pass
    return;
  }
  const auto factor = torch::scalar_tensor(scale, torch::TensorOptions().dtype(torch::kFloat));
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto& t = tensors[i];
    if (is_bound(t, i)) {
      slice(flat_, i).mul_(scale);
    } else if (t.scalar_type() == torch::kFloat && t.is_contiguous()) {
      auto out = t.view({-1});
      torch::mul_out(out, slice(flat_, i), factor);
    } else {
      t.copy_(slice(flat_, i).view(t.sizes()) * scale);
    }
  }
}

namespace {

// One link of the checksum's FNV-1a chain: a tensor's (sum of the raw bits as int64, numel).
uint64_t chain(uint64_t h, int64_t bit_sum, int64_t numel) {
  for (uint64_t v : {static_cast<uint64_t>(bit_sum), static_cast<uint64_t>(numel)}) {
    h ^= v;
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace

uint64_t checksum(const std::vector<torch::Tensor>& tensors) {
  // Any single changed value changes a tensor's bit sum; the tensor order and sizes enter through
  // the hash chain. Costs one read of each tensor.
  uint64_t h = kFnvOffset;
  for (const auto& t : tensors) h = chain(h, raw_bit_sum(t), t.numel());
  return h;
}

uint64_t checksum_of_bit_sum(int64_t bit_sum, int64_t numel) { return chain(kFnvOffset, bit_sum, numel); }

void outer_step(const torch::Tensor& global, const torch::Tensor& momentum, const torch::Tensor& g,
                const torch::Tensor& copy, OuterStepFactors f, int64_t* bit_sum) {
  const int64_t n = global.numel();
  for (const auto* t : {&momentum, &g, &copy})
    HT_REQUIRE(!t->defined() || t->numel() == n, ExitCode::kRuntime,
               "outer_step: a tensor of {} elements beside the outer values' {}", t->numel(), n);
  torch::NoGradGuard no_grad;
  const auto cpu_fp32 = [](const torch::Tensor& t) {
    return !t.defined() || (t.is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous());
  };
  if (cpu_fp32(global) && cpu_fp32(momentum) && cpu_fp32(g) && cpu_fp32(copy)) {
    const auto at = [](const torch::Tensor& t, int64_t first) {
      return t.defined() ? t.data_ptr<float>() + first : nullptr;
    };
    const int64_t sum = chunked_sum(n, [&](int64_t first, int64_t count) {
      return outer_step_summing_bits(at(global, first), at(momentum, first), at(g, first), at(copy, first), count, f);
    });
    if (bit_sum != nullptr) *bit_sum = sum;
    return;
  }
  if (g.defined()) {
    torch::Tensor u = g;
    if (f.momentum != 0.0f) {
      momentum.mul_(f.momentum).add_(g);
      u = f.nesterov ? g + f.momentum * momentum : momentum;
    }
    if (f.lr != 1.0f) u = u * f.lr;
    global.sub_(u);
  }
  if (copy.defined()) copy.copy_(global);
  if (bit_sum != nullptr) *bit_sum = raw_bit_sum(global);
}

void verify_replicas_equal(Communicator& comm, uint64_t local_checksum, const std::string& what) {
  require_agreement(comm, local_checksum, ExitCode::kRuntime,
                    fmt::format("consistency check failed after {}: replicas differ from rank 0", what));
}

void broadcast_tensors(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root) {
  if (comm.size() == 1) return;
  torch::NoGradGuard no_grad;
  for (const auto& t : tensors) {
    if (t.device().is_cpu() && t.is_contiguous()) {
      comm.broadcast(t.data_ptr(), t.numel() * t.element_size(), root);
      continue;
    }
    auto host = t.to(torch::kCPU).contiguous();
    comm.broadcast(host.data_ptr(), host.numel() * host.element_size(), root);
    t.copy_(host);
  }
}

}  // namespace ht::comm
