// Fused, GPU-aware tensor averaging (see param_averager.h for the design).
#include "comm/param_averager.h"

#include <torch/cuda.h>

#include <cstdlib>
#include <cstring>

#if __has_include(<mpi-ext.h>)
#include <mpi.h>
#include <mpi-ext.h>
#endif

#include "comm/agree.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"

namespace ht::comm {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

torch::ScalarType scalar_type(ExchangeDType t) {
  switch (t) {
    case ExchangeDType::kF32: return torch::kFloat;
    case ExchangeDType::kBF16: return torch::kBFloat16;
    case ExchangeDType::kF16: return torch::kHalf;
  }
  return torch::kFloat;
}

size_t exchange_bytes(ExchangeDType t) { return t == ExchangeDType::kF32 ? 4 : 2; }

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

std::string to_string(ExchangeDType t) {
  switch (t) {
    case ExchangeDType::kF32: return "fp32";
    case ExchangeDType::kBF16: return "bf16";
    case ExchangeDType::kF16: return "fp16";
  }
  return "?";
}

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
  padded_numel_ = (total_numel_ + world - 1) / world * world;  // 16-bit exchange splits buckets into W chunks

  const bool staged = opts_.force_staging || env_forces_staging() || (device_.is_cuda() && !comm_.cuda_aware());
  path_ = staged ? TransferPath::kStaged : (device_.is_cuda() ? TransferPath::kCudaAware : TransferPath::kHostDirect);

  flat_ = torch::zeros({padded_numel_}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  const auto wire_type = scalar_type(opts_.dtype);
  if (opts_.dtype == ExchangeDType::kF32 && !staged) {
    wire_ = flat_;
  } else {
    wire_ = staged ? host_buffer(padded_numel_, wire_type)
                   : torch::zeros({padded_numel_}, torch::TensorOptions().dtype(wire_type).device(device_));
  }
  if (opts_.dtype != ExchangeDType::kF32)
    recv_ = staged ? host_buffer(padded_numel_, wire_type) : torch::empty_like(wire_);

  const int64_t bucket_elems = opts_.bucket_mb <= 0
      ? padded_numel_
      : std::max(world, opts_.bucket_mb * kMiB / static_cast<int64_t>(exchange_bytes(opts_.dtype)) / world * world);
  for (int64_t b = 0; b < padded_numel_; b += bucket_elems)
    buckets_.push_back({b, std::min(bucket_elems, padded_numel_ - b)});

  HT_INFO("comm: averaging {} = {} tensors, {} elements, {:.2f} MiB per exchange in {}, {} bucket(s), {}",
          opts_.name, like.size(), total_numel_, static_cast<double>(bytes_per_call()) / kMiB, to_string(opts_.dtype),
          buckets_.size(), to_string(path_));
}

ParamAverager::~ParamAverager() = default;

uint64_t ParamAverager::bytes_per_call() const {
  return static_cast<uint64_t>(padded_numel_) * exchange_bytes(opts_.dtype);
}

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

void* ParamAverager::wire_ptr(int64_t elem_offset) const {
  return static_cast<char*>(wire_.data_ptr()) + elem_offset * static_cast<int64_t>(wire_.element_size());
}

void ParamAverager::copy_to_wire() {
  if (!wire_.is_same(flat_)) wire_.copy_(flat_);  // dtype conversion and/or device -> host
  sync_if_cuda(flat_);
}

// fp32 exchange leaves the sum (scale pending); the 16-bit exchange already scaled in fp32 before rounding.
double ParamAverager::pending_scale() const {
  return opts_.dtype == ExchangeDType::kF32 && comm_.size() > 1 ? 1.0 / comm_.size() : 1.0;
}

void ParamAverager::copy_from_wire(bool scale) {
  if (!wire_.is_same(flat_)) flat_.copy_(wire_);
  if (scale && pending_scale() != 1.0) flat_.mul_(pending_scale());
}

// Reduce-scatter half of a 16-bit bucket is in recv_: row j came from rank j. Sum the rows in
// fp32 (fixed order), scale, round once into this rank's chunk, then allgather the chunks.
void ParamAverager::finish_16bit_bucket(const Bucket& b) {
  const int64_t world = comm_.size(), per = b.count / world;
  auto rows = recv_.narrow(0, b.begin, b.count).view({world, per});
  auto mean = rows.sum(0, false, torch::kFloat).mul_(1.0 / world);
  const int64_t mine = b.begin + comm_.rank() * per;
  wire_.narrow(0, mine, per).copy_(mean);
  sync_if_cuda(wire_);
  comm_.allgather(wire_ptr(mine), wire_ptr(b.begin), static_cast<size_t>(per) * 2);
}

void ParamAverager::launch(bool blocking) {
  copy_to_wire();
  const bool f32 = opts_.dtype == ExchangeDType::kF32;
  for (const auto& b : buckets_) {
    if (f32) {
      if (blocking)
        comm_.allreduce(wire_ptr(b.begin), static_cast<size_t>(b.count), DType::kF32, ReduceOp::kSum);
      else
        requests_.push_back(comm_.iallreduce(wire_ptr(b.begin), static_cast<size_t>(b.count), DType::kF32,
                                             ReduceOp::kSum));
      continue;
    }
    const size_t per_rank_bytes = static_cast<size_t>(b.count / comm_.size()) * 2;
    void* recv = static_cast<char*>(recv_.data_ptr()) + b.begin * 2;
    if (blocking) {
      comm_.alltoall(wire_ptr(b.begin), recv, per_rank_bytes);
      finish_16bit_bucket(b);
    } else {
      requests_.push_back(comm_.ialltoall(wire_ptr(b.begin), recv, per_rank_bytes));
    }
  }
}

void ParamAverager::allreduce_mean() {
  HT_REQUIRE(!pending(), ExitCode::kRuntime, "ParamAverager({}): exchange already pending", opts_.name);
  launch(true);
  copy_from_wire(true);
}

void ParamAverager::start_mean() {
  HT_REQUIRE(!pending(), ExitCode::kRuntime, "ParamAverager({}): exchange already pending", opts_.name);
  launch(false);
  if (requests_.empty()) requests_.push_back(nullptr);  // keep pending() true until wait_mean()
}

bool ParamAverager::test_mean() {
  bool done = true;
  for (auto& r : requests_)
    if (r) done = r->test() && done;
  return done;
}

void ParamAverager::wait_mean() {
  HT_REQUIRE(pending(), ExitCode::kRuntime, "ParamAverager({}): wait_mean without start_mean", opts_.name);
  for (auto& r : requests_)
    if (r) r->wait();
  requests_.clear();
  if (opts_.dtype != ExchangeDType::kF32)
    for (const auto& b : buckets_) finish_16bit_bucket(b);
  copy_from_wire(true);
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

uint64_t checksum(const std::vector<torch::Tensor>& tensors) {
  // FNV-1a over (sum of the raw bits as int64, numel) per tensor: any single changed value changes
  // the sum; the tensor order and sizes enter through the hash chain. Costs one read of each tensor.
  uint64_t h = kFnvOffset;
  for (const auto& t0 : tensors) {
    auto t = t0.detach().contiguous().reshape({-1});
    torch::ScalarType bits = torch::kLong;
    switch (t.element_size()) {
      case 1: bits = torch::kChar; break;
      case 2: bits = torch::kShort; break;
      case 4: bits = torch::kInt; break;
      default: bits = torch::kLong; break;
    }
    const auto raw = t.view(bits);
    const auto sum = static_cast<uint64_t>(raw.sum(torch::kLong).item<int64_t>());
    for (uint64_t v : {sum, static_cast<uint64_t>(t.numel())}) {
      h ^= v;
      h *= kFnvPrime;
    }
  }
  return h;
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
