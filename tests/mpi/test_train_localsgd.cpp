// LocalSgd on real MPI ranks with a tiny linear model and rank-dependent data: sync counts,
// bitwise-equal replicas, N=1 == synchronous gradient averaging, DiLoCo(1, 0) == averaging,
// 16-bit exchange, staging == direct, drift, checksum mismatch, overlap semantics, bad input.
// The strategies come from make_data_parallel (train/data_parallel), which owns the optimizer.
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/communicator.h"
#include "comm/param_averager.h"
#include "config/enum_names.h"
#include "core/error.h"
#include "train/data_parallel/local_sgd.h"

namespace {

using ht::config::LocalSgdConfig;
using ht::train::DataParallel;
using ht::train::LocalSgd;

// SGD without momentum or decay (lr 0.1), or AdamW without decay (lr 1e-2): the optimizers of the
// old torch::optim-based version of these tests, now behind the optimizer seam.
ht::config::Config config_of(const LocalSgdConfig& l, bool adam = false) {
  ht::config::Config c;
  c.local_sgd = l;
  c.train.optimizer = adam ? ht::config::OptimizerKind::kAdamw : ht::config::OptimizerKind::kSgd;
  c.train.lr = adam ? 1e-2 : 0.1;
  c.train.momentum = 0.0;
  c.train.weight_decay = 0.0;
  return c;
}

struct Replica {
  torch::nn::Sequential model{nullptr};
  int64_t out_;
  bool free_grads = false;  // free the gradients every step even when the strategy keeps them in its buffer
  // Different init per rank on purpose: the strategy must broadcast rank 0's weights.
  explicit Replica(int rank, int64_t out = 2) : out_(out) {
    torch::manual_seed(17 + rank);
    model = torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::Tanh(), torch::nn::Linear(5, out));
  }
  std::unique_ptr<DataParallel> strategy(ht::comm::Communicator& comm, const LocalSgdConfig& l, bool adam = false) {
    return ht::train::make_data_parallel(*model, comm, config_of(l, adam));
  }
  void train_step(DataParallel& dp, int rank, int step) {
    torch::manual_seed(1000 * (rank + 1) + step);
    auto x = torch::randn({8, 6});
    auto y = torch::sin(x.sum(1, true) * (rank + 1)).repeat({1, out_});
    dp.zero_grad();
    if (free_grads)
      for (auto& p : model->parameters()) p.mutable_grad().reset();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    dp.after_backward();
    dp.clip_and_update(0.0);
    dp.after_update();
  }
  std::vector<torch::Tensor> params() { return model->parameters(); }
};

LocalSgd& as_local(DataParallel& dp) { return dynamic_cast<LocalSgd&>(dp); }

LocalSgdConfig local(int64_t n) {
  LocalSgdConfig c;
  c.enabled = true;
  c.steps = n;
  return c;
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double atol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 0, atol)) << "tensor " << i << " max diff "
                                                      << (a[i] - b[i]).abs().max().item<double>();
}

// Gathers every rank's flattened parameters and checks they are bitwise equal to this rank's.
void expect_replicas_bitwise_equal(ht::comm::Communicator& comm, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> flat;
  for (auto& p : params) flat.push_back(p.detach().reshape({-1}));
  auto mine = torch::cat(flat).contiguous();
  auto all = torch::empty({comm.size(), mine.numel()});
  comm.allgather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()) * 4);
  for (int r = 0; r < comm.size(); ++r) EXPECT_TRUE(torch::equal(all[r], mine)) << "rank " << r << " differs";
}

struct RunOptions {
  bool finish = true;                     // finish() the strategy (its closing sync) before reading the parameters
  bool free_grads = false;                // free the gradients after each step instead of keeping them in the flat buffer
  ht::train::SyncStats* stats = nullptr;  // where to copy the strategy's counters, if anywhere
};
RunOptions unfinished() {
  RunOptions o;
  o.finish = false;
  return o;
}
RunOptions gradients(bool freed) {
  RunOptions o;
  o.free_grads = freed;
  return o;
}
RunOptions counted(ht::train::SyncStats* stats) {
  RunOptions o;
  o.stats = stats;
  return o;
}

// Trains `steps` steps and returns the final parameters.
std::vector<torch::Tensor> run(ht::comm::Communicator& comm, LocalSgdConfig cfg, int steps, const RunOptions& opt = {}) {
  Replica rep(comm.rank());
  rep.free_grads = opt.free_grads;
  auto dp = rep.strategy(comm, cfg);
  for (int s = 0; s < steps; ++s) rep.train_step(*dp, comm.rank(), s);
  if (opt.finish) dp->finish();
  if (opt.stats) *opt.stats = dp->stats();
  std::vector<torch::Tensor> out;
  for (auto& p : rep.params()) out.push_back(p.detach().clone());
  return out;
}

TEST(LocalSgd, StartsFromRankZeroWeights) {
  auto comm = ht::comm::make_mpi_world();
  Replica rep(comm->rank());
  auto dp = rep.strategy(*comm, local(4));
  expect_replicas_bitwise_equal(*comm, rep.params());
  expect_close(rep.params(), Replica(0).params(), 0);
}

TEST(LocalSgd, SyncCountIsFloorOfStepsOverNPlusFinal) {
  auto comm = ht::comm::make_mpi_world();
  for (auto [n, warmup, steps] : {std::tuple{3, 0, 10}, std::tuple{3, 2, 10}, std::tuple{3, 0, 9}, std::tuple{1, 0, 5}}) {
    Replica rep(comm->rank());
    auto cfg = local(n);
    cfg.warmup_steps = warmup;
    auto dp = rep.strategy(*comm, cfg);
    auto& lsgd = as_local(*dp);
    for (int s = 0; s < steps; ++s) rep.train_step(lsgd, comm->rank(), s);
    const int64_t after_warmup = steps - warmup;
    EXPECT_EQ(lsgd.stats().syncs, after_warmup / n) << "N=" << n << " warmup=" << warmup << " T=" << steps;
    EXPECT_EQ(lsgd.stats().grad_allreduces, warmup);
    EXPECT_EQ(lsgd.local_step(), after_warmup % n);
    lsgd.finish();
    lsgd.finish();  // idempotent
    EXPECT_EQ(lsgd.stats().syncs, after_warmup / n + (after_warmup % n ? 1 : 0));
    EXPECT_EQ(lsgd.local_step(), 0);
    expect_replicas_bitwise_equal(*comm, rep.params());
  }
}

TEST(LocalSgd, ReplicasBitwiseEqualAfterEverySync) {
  auto comm = ht::comm::make_mpi_world();
  Replica rep(comm->rank());
  auto dp = rep.strategy(*comm, local(4));
  auto& lsgd = as_local(*dp);
  for (int s = 0; s < 12; ++s) {
    rep.train_step(lsgd, comm->rank(), s);
    if (lsgd.local_step() == 0) expect_replicas_bitwise_equal(*comm, rep.params());
  }
  EXPECT_EQ(lsgd.stats().syncs, 3);
}

TEST(LocalSgd, NEqualsOneWithPlainSgdMatchesGradientAveraging) {
  auto comm = ht::comm::make_mpi_world();
  LocalSgdConfig dp;  // enabled = false: per-step gradient all-reduce
  auto sync_grads = run(*comm, dp, 10);
  auto local_sgd = run(*comm, local(1), 10);
  expect_close(sync_grads, local_sgd, 1e-5);
  auto independent = run(*comm, local(1000), 10, unfinished());  // sanity: the data differ per rank
  if (comm->rank() == 1) {
    double diff = 0;
    for (size_t i = 0; i < independent.size(); ++i) diff += (independent[i] - sync_grads[i]).abs().sum().item<double>();
    EXPECT_GT(diff, 1e-3);
  }
}

// Gradient averaging with the gradients kept in the flat buffer (zeroed in place, no pack or
// unpack) gives the same bits as freeing them every step (copied in at every average).
TEST(LocalSgd, KeptGradientsAverageBitwiseLikeFreedOnes) {
  auto comm = ht::comm::make_mpi_world();
  LocalSgdConfig dp;
  auto kept = run(*comm, dp, 6, gradients(/*freed=*/false));
  auto freed = run(*comm, dp, 6, gradients(/*freed=*/true));
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_TRUE(torch::equal(kept[i], freed[i])) << "tensor " << i;

  for (bool overlap : {false, true}) {
    dp.overlap_grad_allreduce = overlap;
    auto k = run(*comm, dp, 6, gradients(false)), f = run(*comm, dp, 6, gradients(true));
    for (size_t i = 0; i < k.size(); ++i) EXPECT_TRUE(torch::equal(k[i], f[i])) << "tensor " << i;
  }
  {  // overlapped: the gradients are created in the flat buffer up front (the first step's hooks need them there)
    dp.overlap_grad_allreduce = true;
    Replica rep(comm->rank());
    auto strat = rep.strategy(*comm, dp);
    EXPECT_EQ(rep.params()[0].grad().defined(), comm->size() > 1);
  }
  dp.overlap_grad_allreduce = false;
  Replica rep(comm->rank());
  auto strat = rep.strategy(*comm, dp);
  EXPECT_FALSE(rep.params()[0].grad().defined());  // blocking path: nothing bound before the first average
  rep.train_step(*strat, comm->rank(), 0);
  const void* before = rep.params()[0].grad().data_ptr();
  rep.train_step(*strat, comm->rank(), 1);
  EXPECT_EQ(rep.params()[0].grad().data_ptr(), before);  // backward accumulated into the same buffer
}

TEST(LocalSgd, DilocoWithOuterLrOneAndNoMomentumEqualsAveraging) {
  auto comm = ht::comm::make_mpi_world();
  auto cfg = local(4);
  auto plain = run(*comm, cfg, 14);
  cfg.outer = ht::config::OuterOptimizer::kDiloco;
  cfg.outer_lr = 1.0;
  cfg.outer_momentum = 0.0;
  expect_close(plain, run(*comm, cfg, 14), 1e-6);
  cfg.outer_lr = 0.7;
  cfg.outer_momentum = 0.9;
  auto nesterov = run(*comm, cfg, 14);  // consistency check inside: replicas agree after each outer step
  double diff = 0;
  for (size_t i = 0; i < plain.size(); ++i) diff += (plain[i] - nesterov[i]).abs().sum().item<double>();
  EXPECT_GT(diff, 1e-4);
  expect_replicas_bitwise_equal(*comm, nesterov);
}

// A blocking outer exchange works on the parameters' own buffer: the pseudo-gradient is written over
// them, and the outer step, the copy of its result back and the checksum's bits are one pass. Two syncs with known local moves against the rule worked out here:
// DiLoCo's Nesterov step, the plain outer step (lr 1, no momentum), and an int8 delta (within its
// rounding). The parameters are checked to sit back to back in one buffer, so the fused path ran.
TEST(LocalSgd, OuterStepsOnTheParameterBufferFollowTheRuleWorkedByHand) {
  auto comm = ht::comm::make_mpi_world();
  struct Case {
    double lr, momentum;
    ht::config::ExchangeDtype dtype;
  };
  for (const Case c : {Case{0.7, 0.9, ht::config::ExchangeDtype::kFp32}, Case{1.0, 0.0, ht::config::ExchangeDtype::kFp32},
                       Case{1.0, 0.0, ht::config::ExchangeDtype::kInt8}}) {
    const std::string what = "lr " + std::to_string(c.lr) + ", momentum " + std::to_string(c.momentum) + ", " +
                             std::string(ht::config::name_of(c.dtype));
    auto cfg = local(1);  // fp32 through DiLoCo's rule; int8 as the plain average takes it (lr 1, no momentum)
    cfg.outer = c.dtype == ht::config::ExchangeDtype::kFp32 ? ht::config::OuterOptimizer::kDiloco
                                                            : ht::config::OuterOptimizer::kAverage;
    cfg.outer_lr = c.lr;
    cfg.outer_momentum = c.momentum;
    cfg.comm_dtype = c.dtype;
    cfg.quant_block = 16;
    Replica rep(comm->rank());
    auto dp = rep.strategy(*comm, cfg);
    auto params = rep.params();
    for (size_t i = 0; i + 1 < params.size(); ++i)
      ASSERT_EQ(params[i].data_ptr<float>() + params[i].numel(), params[i + 1].data_ptr<float>())
          << what << ": the parameters are not stored in one exchange buffer";
    std::vector<torch::Tensor> global, momentum;
    for (auto& p : params) global.push_back(p.detach().clone()), momentum.push_back(torch::zeros_like(p));
    double tolerance = 1e-6;  // grows by an int8 sync's rounding
    for (int sync = 0; sync < 2; ++sync) {
      double rounding = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        // Every rank's local move, drawn here on every rank: the mean is known without a collective.
        auto mean_move = torch::zeros_like(params[i]), mine = torch::Tensor();
        for (int r = 0; r < comm->size(); ++r) {
          torch::manual_seed(100 * sync + 10 * static_cast<int>(i) + r);
          auto move = torch::randn_like(params[i]) * 0.01;
          mean_move += move / comm->size();
          if (r == comm->rank()) mine = move;
          if (c.dtype != ht::config::ExchangeDtype::kFp32)  // two roundings of half a block's max / 127 each
            rounding = std::max(rounding, move.abs().max().item<double>() / 127);
        }
        {
          torch::NoGradGuard no_grad;
          params[i].add_(mine);  // the local values: the last outer values moved by this rank's steps
        }
        const auto g = -mean_move;  // mean of (global - local)
        momentum[i] = momentum[i] * c.momentum + g;
        global[i] = global[i] - (g + momentum[i] * c.momentum) * c.lr;
      }
      tolerance += rounding;
      dp->after_update();  // N = 1: a sync
      ASSERT_EQ(dp->stats().syncs, sync + 1) << what;
      expect_close(params, global, tolerance);
      expect_replicas_bitwise_equal(*comm, params);
    }
  }
}

TEST(LocalSgd, SixteenBitExchangeStaysCloseToFp32) {
  auto comm = ht::comm::make_mpi_world();
  auto ref = run(*comm, local(3), 9);
  for (const char* dt : {"bf16", "fp16"}) {
    auto cfg = local(3);
    cfg.comm_dtype = *ht::config::parse_enum<ht::config::ExchangeDtype>(dt);
    auto got = run(*comm, cfg, 9);
    // 3 syncs, each rounding params of magnitude < 1 to 16 bits (<= 2^-8 relative for bf16).
    expect_close(ref, got, std::string(dt) == "bf16" ? 2e-2 : 3e-3);
    expect_replicas_bitwise_equal(*comm, got);
  }
}

TEST(LocalSgd, StagingPathGivesTheSameParamsAsDirectPath) {
  auto comm = ht::comm::make_mpi_world();
  ht::train::SyncStats direct_stats, staged_stats;
  auto direct = run(*comm, local(2), 6, counted(&direct_stats));
  setenv("HPCTRAIN_COMM_FORCE_STAGING", "1", 1);
  auto staged = run(*comm, local(2), 6, counted(&staged_stats));
  unsetenv("HPCTRAIN_COMM_FORCE_STAGING");
  expect_close(direct, staged, 0);
  // The path each run claims: 3 syncs in 6 steps, every one through the host buffer when forced, none
  // otherwise (equal parameters alone would pass if the variable were ignored).
  EXPECT_EQ(direct_stats.syncs, 3);
  EXPECT_EQ(direct_stats.staged_transfers, 0);
  EXPECT_EQ(staged_stats.syncs, 3);
  EXPECT_GE(staged_stats.staged_transfers, staged_stats.syncs) << "HPCTRAIN_COMM_FORCE_STAGING=1 never staged";
}

TEST(LocalSgd, DriftIsZeroAfterSyncAndPositiveAfterLocalSteps) {
  auto comm = ht::comm::make_mpi_world();
  Replica rep(comm->rank());
  auto dp = rep.strategy(*comm, local(4));
  auto& lsgd = as_local(*dp);
  EXPECT_LT(lsgd.measure_drift(), 1e-6);  // identical start
  for (int s = 0; s < 3; ++s) rep.train_step(lsgd, comm->rank(), s);
  const double before = lsgd.measure_drift();
  EXPECT_GT(before, 1e-4);
  rep.train_step(lsgd, comm->rank(), 3);  // 4th step: sync
  EXPECT_EQ(lsgd.stats().syncs, 1);
  EXPECT_GT(lsgd.stats().last_drift, 1e-4);  // measured at the sync, before averaging
  EXPECT_LT(lsgd.measure_drift(), 1e-6);      // W=3: the mean of equal values may round by an ulp
}

// Forwards to a real communicator; on rank `bad`, changes one value of every fp32 all-reduce result
// longer than one element (the parameter averages), as a faulty link or device would.
class CorruptingComm final : public ht::comm::Communicator {
 public:
  CorruptingComm(ht::comm::Communicator& inner, int bad) : inner_(inner), bad_(bad) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int local_rank() const override { return inner_.local_rank(); }
  int local_size() const override { return inner_.local_size(); }
  std::string hostname() const override { return inner_.hostname(); }
  void barrier() override { inner_.barrier(); }
  void allreduce(void* buf, size_t count, ht::comm::DType t, ht::comm::ReduceOp op) override {
    inner_.allreduce(buf, count, t, op);
    if (rank() == bad_ && t == ht::comm::DType::kF32 && count > 1) {
      static_cast<float*>(buf)[0] += 1e-3f;
      ++corrupted;
    }
  }
  void broadcast(void* buf, size_t bytes, int root) override { inner_.broadcast(buf, bytes, root); }
  void allgather(const void* send, void* recv, size_t bytes) override { inner_.allgather(send, recv, bytes); }
  void reduce_scatter(const float* send, float* recv, size_t count) override { inner_.reduce_scatter(send, recv, count); }
  std::unique_ptr<ht::comm::Communicator> split(int color, int key) override { return inner_.split(color, key); }
  int node_leader() const override { return inner_.node_leader(); }
  void send(const void* buf, size_t bytes, int dest) override { inner_.send(buf, bytes, dest); }
  void recv(void* buf, size_t bytes, int src) override { inner_.recv(buf, bytes, src); }
  [[noreturn]] void abort(int code) override {
    inner_.abort(code);
    std::abort();  // not reached: GCC does not carry [[noreturn]] through the virtual call
  }
  int corrupted = 0;

 private:
  ht::comm::Communicator& inner_;
  int bad_;
};

// The check compares the mean each replica applied: the bit sum the 1/W pass adds up must see a
// result that differs on one rank, blocking and overlapped alike.
TEST(LocalSgd, ForcedChecksumMismatchIsDetected) {
  auto world = ht::comm::make_mpi_world();
  for (int64_t overlap : {0, 1}) {
    const int bad = world->size() - 1;
    CorruptingComm comm(*world, bad);
    Replica rep(comm.rank());
    auto cfg = local(2);
    cfg.overlap_steps = overlap;
    auto dp = rep.strategy(comm, cfg);
    auto& lsgd = as_local(*dp);
    const int rank = comm.rank();
    try {
      for (int s = 0; s < 4; ++s) rep.train_step(lsgd, rank, s);
      FAIL() << "mismatch not detected, overlap_steps " << overlap;
    } catch (const ht::Error& e) {
      EXPECT_EQ(e.code(), ht::ExitCode::kRuntime);
      EXPECT_NE(std::string(e.what()).find(fmt::format("rank {}", bad)), std::string::npos) << e.what();
      if (rank == bad) {
        EXPECT_GT(comm.corrupted, 0);
      }
    }
    world->barrier();
  }
}

// Overlap k=1, N=4: the average of the step-4 snapshot is applied after step 5 as
// params := mean(P4) + (P5 - P4).
TEST(LocalSgd, OverlapAppliesDeltaCorrectedAverage) {
  auto comm = ht::comm::make_mpi_world();
  Replica rep(comm->rank());
  auto cfg = local(4);
  cfg.overlap_steps = 1;
  auto dp = rep.strategy(*comm, cfg);
  auto& lsgd = as_local(*dp);
  for (int s = 0; s < 3; ++s) rep.train_step(lsgd, comm->rank(), s);
  std::vector<torch::Tensor> p4, mean4, p5;
  // Step 4: after_update() starts the exchange of the step-4 values (P4) without changing them.
  rep.train_step(lsgd, comm->rank(), 3);
  EXPECT_EQ(lsgd.stats().syncs, 1);
  for (auto& p : rep.params()) p4.push_back(p.detach().clone());  // step() started the exchange, params untouched
  for (auto& p : p4) {
    auto all = torch::empty({comm->size(), p.numel()});
    auto c = p.contiguous();
    comm->allgather(c.data_ptr(), all.data_ptr(), static_cast<size_t>(p.numel()) * 4);
    mean4.push_back(all.sum(0).div(comm->size()).view(p.sizes()));
  }
  // Step 5: capture P5 right before after_update() applies the average.
  torch::manual_seed(1000 * (comm->rank() + 1) + 4);
  auto x = torch::randn({8, 6});
  auto y = torch::sin(x.sum(1, true) * (comm->rank() + 1)).repeat({1, 2});
  lsgd.zero_grad();
  torch::mse_loss(rep.model->forward(x), y).backward();
  lsgd.after_backward();
  lsgd.clip_and_update(0.0);
  for (auto& p : rep.params()) p5.push_back(p.detach().clone());
  lsgd.after_update();
  auto now = rep.params();
  for (size_t i = 0; i < now.size(); ++i)
    EXPECT_TRUE(torch::allclose(now[i], mean4[i] + (p5[i] - p4[i]), 0, 1e-6)) << "tensor " << i;
  lsgd.finish();
  EXPECT_EQ(lsgd.stats().syncs, 2);
  expect_replicas_bitwise_equal(*comm, rep.params());
}

// With overlap, the exchange in flight is driven from gradient hooks during the next backward
// (an int8 exchange: its allgather half can start there); without overlap no hook is installed.
// The values are those of the exchange completed at the merge step either way (tested above).
TEST(LocalSgd, OverlappedExchangeIsDrivenFromBackwardHooks) {
  auto comm = ht::comm::make_mpi_world();
  for (int64_t overlap : {0, 1}) {
    Replica rep(comm->rank());
    auto cfg = local(4);
    cfg.overlap_steps = overlap;
    cfg.comm_dtype = ht::config::ExchangeDtype::kInt8;
    cfg.quant_block = 16;
    auto dp = rep.strategy(*comm, cfg);
    auto& lsgd = as_local(*dp);
    for (int s = 0; s < 4; ++s) rep.train_step(lsgd, comm->rank(), s);  // step 4 starts the exchange
    EXPECT_EQ(lsgd.backward_progress_calls(), 0) << "nothing was in flight before step 5";
    rep.train_step(lsgd, comm->rank(), 4);  // its backward runs with the exchange in flight
    if (overlap == 0)
      EXPECT_EQ(lsgd.backward_progress_calls(), 0);
    else
      EXPECT_GE(lsgd.backward_progress_calls(), static_cast<int64_t>(rep.params().size()));
    lsgd.finish();
    expect_replicas_bitwise_equal(*comm, rep.params());
  }
}

TEST(LocalSgd, AveragedOptimizerMomentsAgreeAcrossRanks) {
  auto comm = ht::comm::make_mpi_world();
  Replica rep(comm->rank(), 2);
  auto cfg = local(3);
  cfg.optimizer_state = ht::config::OptimizerState::kAverage;
  auto lsgd = rep.strategy(*comm, cfg, /*adam=*/true);
  for (int s = 0; s < 3; ++s) rep.train_step(*lsgd, comm->rank(), s);
  const std::vector<torch::Tensor> moments = lsgd->optimizer().all_moments();
  ASSERT_EQ(moments.size(), 2 * rep.params().size());
  EXPECT_NO_THROW(ht::comm::verify_replicas_equal(*comm, ht::comm::checksum(moments), "moments"));
  const uint64_t params_bytes = 4 * (6 * 5 + 5 + 5 * 2 + 2);
  EXPECT_GE(lsgd->stats().bytes_last_sync, 3 * params_bytes);  // params + two moments
}

TEST(LocalSgd, BytesPerSyncAndDataParallelBytes) {
  auto comm = ht::comm::make_mpi_world();
  Replica a(comm->rank()), b(comm->rank());
  auto lsgd = a.strategy(*comm, local(4));
  auto dp = b.strategy(*comm, LocalSgdConfig{});
  for (int s = 0; s < 8; ++s) a.train_step(*lsgd, comm->rank(), s), b.train_step(*dp, comm->rank(), s);
  EXPECT_EQ(dp->stats().grad_allreduces, 8);
  EXPECT_EQ(lsgd->stats().syncs, 2);
  EXPECT_EQ(dp->stats().bytes_sent, 4 * lsgd->stats().bytes_sent);  // same payload, 4x as often
}

TEST(LocalSgd, RanksThatDisagreeOnTheModelShapeFailNamingTheRank) {
  auto comm = ht::comm::make_mpi_world();
  Replica rep(comm->rank(), comm->rank() == 1 ? 3 : 2);
  try {
    auto dp = rep.strategy(*comm, local(4));
    FAIL() << "shape mismatch not detected";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 disagree"), std::string::npos) << e.what();
  }
}

TEST(LocalSgd, StepsBelowOneIsRejected) {
  auto comm = ht::comm::make_mpi_world();
  Replica rep(comm->rank());
  EXPECT_THROW(rep.strategy(*comm, local(0)), ht::Error);
}

// An exchange in flight restored into a strategy that already completed others is checked on the
// restored mean, not on a bit sum left from an earlier exchange: the checksum equals the one of the
// run that saved it.
TEST(LocalSgd, RestoredExchangeInFlightIsCheckedOnItsOwnMean) {
  auto comm = ht::comm::make_mpi_world();
  const int rank = comm->rank();
  auto cfg = local(4);
  cfg.overlap_steps = 1;
  Replica saver(rank), reused(rank);
  auto a = saver.strategy(*comm, cfg);
  auto b = reused.strategy(*comm, cfg);
  for (int s = 0; s < 4; ++s) saver.train_step(*a, rank, s);  // the 4th step starts an exchange
  const ht::train::StrategyState st = a->state();              // saved with it in flight
  for (int s = 0; s < 10; ++s) reused.train_step(*b, rank, s);  // two exchanges completed, none in flight
  EXPECT_EQ(b->stats().syncs, 2);
  const uint64_t earlier = b->stats().last_checksum;
  b->load_state(st, /*same_world=*/true);
  saver.train_step(*a, rank, 4);  // completes the exchange
  reused.train_step(*b, rank, 4);
  EXPECT_NE(a->stats().last_checksum, earlier);
  EXPECT_EQ(b->stats().last_checksum, a->stats().last_checksum);
  a->finish();
  b->finish();
}

TEST(LocalSgd, StateRoundTripRestoresCounters) {
  auto comm = ht::comm::make_mpi_world();
  auto cfg = local(4);
  cfg.outer = ht::config::OuterOptimizer::kDiloco;
  Replica rep(comm->rank());
  auto dp = rep.strategy(*comm, cfg);
  for (int s = 0; s < 6; ++s) rep.train_step(*dp, comm->rank(), s);
  const ht::train::StrategyState st = dp->state();
  EXPECT_EQ(st.ints.at("steps"), 6);
  EXPECT_EQ(st.ints.at("since_sync"), 2);
  ASSERT_EQ(st.shared.count("outer_global"), 1u);
  Replica rep2(comm->rank());
  auto restored = rep2.strategy(*comm, cfg);
  restored->load_state(st, /*same_world=*/true);
  EXPECT_EQ(restored->stats().steps, 6);
  EXPECT_EQ(as_local(*restored).local_step(), 2);
  EXPECT_EQ(restored->stats().syncs, 1);
  EXPECT_TRUE(torch::equal(restored->state().shared.at("outer_momentum"), st.shared.at("outer_momentum")));
  dp->finish();
  restored->finish();
}

}  // namespace
