// The per-step gradient all-reduce overlapped with backward (train/data_parallel/grad_overlap.h) on real MPI
// ranks: buckets start inside backward, only on the last micro-batch; the parameters after several
// steps are bitwise those of the same run without overlap (buckets started after backward), with
// gradient accumulation, with bf16 and fp16 exchange, with an unused parameter and with freed
// gradients; on 2 ranks (fp32) and on any rank count (16-bit) also bitwise those of the previous
// blocking path (one MPI_Allreduce per bucket, local_sgd.overlap_grad_allreduce = false).
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm/param_averager.h"
#include "core/error.h"
#include "train/data_parallel/data_parallel.h"
#include "train/data_parallel/grad_overlap.h"

namespace {

using ht::config::ExchangeDtype;

// ~0.92 M parameters (3.7 MB of fp32 gradients): 4 buckets of 1 MiB, boundaries inside tensors.
struct Net {
  torch::nn::Sequential model{nullptr};
  torch::Tensor unused;  // a parameter no forward touches (its bucket waits for after_backward)
  explicit Net(int rank, bool with_unused = false) {
    torch::manual_seed(11 + rank);
    model = torch::nn::Sequential(torch::nn::Linear(256, 1024), torch::nn::Tanh(), torch::nn::Linear(1024, 512),
                                  torch::nn::Tanh(), torch::nn::Linear(512, 256), torch::nn::Tanh(),
                                  torch::nn::Linear(256, 4));
    if (with_unused) unused = model->register_parameter("unused", torch::randn({300}));
  }
  std::vector<torch::Tensor> params() { return model->parameters(); }
};

struct Options {
  ExchangeDtype dtype = ExchangeDtype::kFp32;
  bool overlap = true;      // local_sgd.overlap_grad_allreduce
  bool arm = true;          // call before_backward (the trainer does)
  int accum = 1;
  bool with_unused = false;
  bool free_grads_at = false;  // zero_grad(true) at step 2 (as a skipped step does)
  int64_t bucket_mb = 1;
};

std::vector<torch::Tensor> train(ht::comm::Communicator& comm, const Options& o, int steps = 4) {
  Net net(comm.rank(), o.with_unused);
  ht::config::Config cfg;  // local_sgd.enabled = false: gradients averaged every step
  cfg.train.lr = 1e-3;
  cfg.train.weight_decay = 0.01;
  cfg.local_sgd.comm_dtype = o.dtype;
  cfg.local_sgd.overlap_grad_allreduce = o.overlap;
  cfg.local_sgd.bucket_mb = o.bucket_mb;
  auto dp = ht::train::make_data_parallel(*net.model, comm, cfg);
  for (int s = 0; s < steps; ++s) {
    dp->zero_grad();
    if (o.free_grads_at && s == 2)  // as a caller that frees them would: they must move back into the buffer
      for (auto& p : net.params()) p.mutable_grad().reset();
    for (int m = 0; m < o.accum; ++m) {
      torch::manual_seed(1000 * (comm.rank() + 1) + 10 * s + m);  // rank-dependent data
      auto x = torch::randn({8, 256});
      auto y = torch::randn({8, 4});
      auto loss = torch::mse_loss(net.model->forward(x), y) / o.accum;
      if (o.arm) dp->before_backward(m == o.accum - 1);
      loss.backward();
    }
    dp->after_backward();
    dp->clip_and_update(0.0);
    dp->after_update();
  }
  EXPECT_EQ(dp->stats().grad_allreduces, steps);
  // The path the test claims ran: buckets started inside backward only when overlapped and armed
  // (then in every step: 4 buckets of 1 MiB, the last ones start while earlier layers still run).
  const int64_t in_backward = dp->stats().buckets_in_backward;
  if (o.overlap && o.arm && comm.size() > 1)
    EXPECT_GE(in_backward, steps) << "the overlap was never armed: the buckets all started after backward";
  else
    EXPECT_EQ(in_backward, 0);
  std::vector<torch::Tensor> out;
  for (auto& p : net.params()) out.push_back(p.detach().clone());
  return out;
}

void expect_bitwise(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i].view(torch::kInt), b[i].view(torch::kInt)))
        << what << ": tensor " << i << " max diff " << (a[i] - b[i]).abs().max().item<double>();
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const char* what) {
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << what << ": tensor " << i;
}

// Replicas agree bitwise: every rank gathers every rank's flattened parameters.
void expect_replicas_equal(ht::comm::Communicator& comm, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> flat;
  for (auto& p : params) flat.push_back(p.reshape({-1}));
  auto mine = torch::cat(flat).contiguous();
  auto all = torch::empty({comm.size(), mine.numel()});
  comm.allgather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()) * 4);
  for (int r = 0; r < comm.size(); ++r) EXPECT_TRUE(torch::equal(all[r], mine)) << "rank " << r << " differs";
}

TEST(GradOverlap, OverlappedEqualsUnoverlappedBitwise) {
  auto comm = ht::comm::make_mpi_world();
  for (int accum : {1, 3}) {
    Options armed;
    armed.accum = accum;
    Options after = armed;
    after.arm = false;  // every bucket starts in after_backward
    auto a = train(*comm, armed), b = train(*comm, after);
    expect_bitwise(a, b, accum == 1 ? "no accumulation" : "3 micro-batches");
    expect_replicas_equal(*comm, a);
  }
}

// The previous blocking path: one MPI_Allreduce per bucket, sum then 1/W. On 2 ranks x0 + x1 is
// the same float whatever the order, so the two paths agree bit for bit; on more ranks MPI's
// summation order is its algorithm's, the overlapped path's its ring's: close, not bitwise.
TEST(GradOverlap, EqualsBlockingAllreducePath) {
  auto comm = ht::comm::make_mpi_world();
  for (int accum : {1, 2}) {
    Options overlapped;
    overlapped.accum = accum;
    Options blocking = overlapped;
    blocking.overlap = false;
    auto a = train(*comm, overlapped), b = train(*comm, blocking);
    if (comm->size() == 2)
      expect_bitwise(a, b, "2 ranks, fp32");
    else
      expect_close(a, b, "3+ ranks, fp32");
  }
}

TEST(GradOverlap, SixteenBitExchangeBitwiseOnAnyRankCount) {
  auto comm = ht::comm::make_mpi_world();
  for (auto dtype : {ExchangeDtype::kBf16, ExchangeDtype::kFp16}) {
    Options overlapped;
    overlapped.dtype = dtype;
    overlapped.accum = 2;
    Options after = overlapped;
    after.arm = false;
    Options blocking = overlapped;
    blocking.overlap = false;  // ParamAverager's alltoall + rank-order fp32 sum + allgather
    auto a = train(*comm, overlapped);
    expect_bitwise(a, train(*comm, after), "16-bit, armed vs not");
    expect_bitwise(a, train(*comm, blocking), "16-bit, overlapped vs blocking");
  }
}

TEST(GradOverlap, UnusedParameterAndFreedGradients) {
  auto comm = ht::comm::make_mpi_world();
  Options o;
  o.with_unused = true;
  o.free_grads_at = true;
  Options after = o;
  after.arm = false;
  Options blocking = o;
  blocking.overlap = false;
  auto a = train(*comm, o);
  expect_bitwise(a, train(*comm, after), "unused parameter, freed gradients");
  if (comm->size() == 2) expect_bitwise(a, train(*comm, blocking), "vs blocking");
  expect_replicas_equal(*comm, a);
}

// GradOverlap directly: the hooks start every bucket inside the armed backward and none in an
// unarmed one (earlier micro-batches), and complete() leaves the mean in the gradients.
TEST(GradOverlap, HooksStartBucketsOnlyInTheArmedBackward) {
  auto comm = ht::comm::make_mpi_world();
  Net net(0);
  auto params = net.params();
  std::vector<torch::Tensor> grads;
  for (auto& p : params) {
    p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  ht::comm::ParamAverager avg(*comm, grads, {});
  ASSERT_TRUE(avg.bind(grads));
  ht::train::GradOverlap overlap(*comm, avg, params, /*bucket_bytes=*/300 * 1024, ht::comm::ExchangeDType::kF32);
  ASSERT_GT(overlap.num_buckets(), 8u);
  auto backward_of = [&](Net& n, int seed) {
    torch::manual_seed(seed + comm->rank());
    torch::mse_loss(n.model->forward(torch::randn({4, 256})), torch::randn({4, 4})).backward();
  };
  auto backward = [&](int seed) { backward_of(net, seed); };
  // The same two micro-batches on a twin without hooks: the local gradient sum (the buckets that
  // start during the armed backward are reduced in place, so the hooked one is not the reference).
  Net twin(0);
  backward_of(twin, 1);
  backward_of(twin, 2);
  backward(1);  // not armed: accumulation only
  EXPECT_EQ(overlap.started_in_backward(), 0u);
  overlap.arm();
  backward(2);
  EXPECT_EQ(overlap.started_in_backward(), overlap.num_buckets());
  overlap.complete();
  const auto twin_params = twin.params();
  for (size_t i = 0; i < params.size(); ++i) {
    auto mean = twin_params[i].grad().clone();
    comm->allreduce(mean.data_ptr(), static_cast<size_t>(mean.numel()), ht::comm::DType::kF32,
                    ht::comm::ReduceOp::kSum);
    mean.mul_(1.0 / comm->size());
    EXPECT_TRUE(torch::allclose(params[i].grad(), mean, 1e-6, 1e-7)) << "tensor " << i;
    EXPECT_TRUE(avg.is_bound(params[i].grad(), i));
  }
  // After complete() the next armed backward starts every bucket again.
  for (auto& p : params) p.mutable_grad().zero_();
  overlap.arm();
  backward(3);
  EXPECT_EQ(overlap.started_in_backward(), overlap.num_buckets());
  overlap.complete();
}

}  // namespace
