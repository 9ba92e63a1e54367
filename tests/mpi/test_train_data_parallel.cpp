// The data-parallel strategies beyond per-step averaging and plain local SGD, on real MPI ranks:
// ZeRO-1 against the unsharded per-step mode (bitwise on 2 ranks without clipping, 1e-6 with it,
// 1/W of the optimizer state, the state gathered to the unsharded layout and re-sharded), streamed
// fragments (each range exchanged once per cycle at its own step), int8/int4 exchanges, and the
// passive view of the averaged model with exchanges in flight. Hierarchical groups (also with
// ZeRO-1 inside them) need 4 ranks (mpi.mpi_train_hierarchical.np4 runs the Hierarchical.* cases).
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "core/error.h"
#include "train/data_parallel/local_sgd.h"

namespace {

using ht::config::LocalSgdConfig;
using ht::train::DataParallel;

// 7x5 + 5 + 5x3 + 3 = 58 values: an uneven split on 3 ranks (ZeRO-1 pads to 60).
struct Net {
  torch::nn::Sequential model{nullptr};
  explicit Net(int rank) {
    torch::manual_seed(23 + rank);  // differs per rank: the strategy broadcasts rank 0's weights
    model = torch::nn::Sequential(torch::nn::Linear(7, 5), torch::nn::Tanh(), torch::nn::Linear(5, 3));
  }
  std::vector<torch::Tensor> params() { return model->parameters(); }
};

ht::config::Config config_of(const LocalSgdConfig& l, double clip = 0.0, bool sgd = false) {
  ht::config::Config c;
  c.local_sgd = l;
  c.train.lr = sgd ? 0.1 : 1e-2;
  c.train.weight_decay = sgd ? 0.0 : 0.1;
  c.train.momentum = 0.0;
  c.train.grad_clip = clip;
  c.train.optimizer = sgd ? ht::config::OptimizerKind::kSgd : ht::config::OptimizerKind::kAdamw;
  return c;
}

double step(DataParallel& dp, Net& net, int rank, int s, double clip) {
  torch::manual_seed(1000 * (rank + 1) + s);
  auto x = torch::randn({6, 7});
  auto y = torch::sin(x.sum(1, true) * (rank + 1)).repeat({1, 3});
  dp.zero_grad();
  torch::mse_loss(net.model->forward(x), y).backward();
  dp.after_backward();
  const double norm = dp.clip_and_update(clip);
  dp.after_update();
  return norm;
}

struct Outcome {
  std::vector<torch::Tensor> params;
  std::vector<double> norms;
};

Outcome train(ht::comm::Communicator& comm, ht::config::Config cfg, int steps) {
  Net net(comm.rank());
  auto dp = ht::train::make_data_parallel(*net.model, comm, cfg);
  Outcome o;
  for (int s = 0; s < steps; ++s) o.norms.push_back(step(*dp, net, comm.rank(), s, cfg.train.grad_clip));
  dp->finish();
  for (auto& p : net.params()) o.params.push_back(p.detach().clone());
  return o;
}

// The parameters of every rank, flattened in layout order, bitwise equal to this rank's.
void expect_replicas_equal(ht::comm::Communicator& comm, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> flat;
  for (auto& p : params) flat.push_back(p.detach().reshape({-1}));
  auto mine = torch::cat(flat).contiguous();
  auto all = torch::empty({comm.size(), mine.numel()});
  comm.allgather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()) * 4);
  for (int r = 0; r < comm.size(); ++r) EXPECT_TRUE(torch::equal(all[r], mine)) << "rank " << r << " differs";
}

// Which elements of [begin, end) of the flat parameters agree bitwise on every rank.
bool range_agrees(ht::comm::Communicator& comm, const std::vector<torch::Tensor>& params, int64_t begin, int64_t end) {
  std::vector<torch::Tensor> flat;
  for (auto& p : params) flat.push_back(p.detach().reshape({-1}));
  auto mine = torch::cat(flat).contiguous();
  end = std::min(end, mine.numel());
  auto all = torch::empty({comm.size(), mine.numel()});
  comm.allgather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()) * 4);
  bool same = true;
  for (int r = 0; r < comm.size(); ++r) same = same && torch::equal(all[r].narrow(0, begin, end - begin), mine.narrow(0, begin, end - begin));
  return same;
}

double relative_gap(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, ((a[i] - b[i]).abs().max() / (b[i].abs().max() + 1e-30)).item<double>());
  return worst;
}

LocalSgdConfig local(int64_t n) {
  LocalSgdConfig c;
  c.enabled = true;
  c.steps = n;
  return c;
}

}  // namespace

TEST(Zero1, EqualsUnshardedBitwiseOnTwoRanksWithoutClipping) {
  auto comm = ht::comm::make_mpi_world();
  auto cfg = config_of(LocalSgdConfig{});
  // foreach: the same float ops element by element however the tensors are cut into shard pieces.
  // The fused kernel (the default; the clipping test below) runs a piece's tail in its scalar loop
  // and may round a few values differently than inside the whole tensor's vector loop: 1e-6 there.
  cfg.train.optimizer_impl = ht::config::OptimizerImpl::kForeach;
  const Outcome plain = train(*comm, cfg, 20);
  cfg.train.shard_optimizer = true;
  const Outcome sharded = train(*comm, cfg, 20);
  if (comm->size() == 2) {
    for (size_t i = 0; i < plain.params.size(); ++i)
      EXPECT_TRUE(torch::equal(plain.params[i], sharded.params[i])) << "tensor " << i;
  }
  EXPECT_LT(relative_gap(sharded.params, plain.params), 1e-6);
  expect_replicas_equal(*comm, sharded.params);
}

TEST(Zero1, WithClippingWithinOneInAMillionAndTheSameGradNorms) {
  auto comm = ht::comm::make_mpi_world();
  auto cfg = config_of(LocalSgdConfig{}, /*clip=*/0.05);
  const Outcome plain = train(*comm, cfg, 20);
  cfg.train.shard_optimizer = true;
  const Outcome sharded = train(*comm, cfg, 20);
  EXPECT_LT(relative_gap(sharded.params, plain.params), 1e-6);
  ASSERT_EQ(plain.norms.size(), sharded.norms.size());
  int clipped = 0;
  for (size_t s = 0; s < plain.norms.size(); ++s) {
    EXPECT_NEAR(sharded.norms[s], plain.norms[s], 1e-6 * plain.norms[s]) << "step " << s;
    clipped += plain.norms[s] > 0.05;
  }
  EXPECT_GT(clipped, 0) << "the clip never triggered: the test would not see a wrong global norm";
}

TEST(Zero1, HoldsItsShareOfTheOptimizerStateAndGathersTheWhole) {
  auto comm = ht::comm::make_mpi_world();
  auto cfg = config_of(LocalSgdConfig{});
  Net a(comm->rank()), b(comm->rank());
  auto plain = ht::train::make_data_parallel(*a.model, *comm, cfg);
  cfg.train.shard_optimizer = true;
  auto sharded = ht::train::make_data_parallel(*b.model, *comm, cfg);
  for (int s = 0; s < 5; ++s) step(*plain, a, comm->rank(), s, 0), step(*sharded, b, comm->rank(), s, 0);
  const int64_t whole = plain->optimizer().state_bytes();
  const int64_t mine = sharded->optimizer().state_bytes();
  const int64_t padded_share = (58 + comm->size() - 1) / comm->size() * 2 * 4;  // 2 moments, fp32
  EXPECT_LE(mine, padded_share);
  EXPECT_EQ(comm->allreduce_sum(mine), whole);  // every value's state on exactly one rank
  const auto full = sharded->optimizer_state();  // collective: the shards gathered
  const auto ref = plain->optimizer_state();
  ASSERT_EQ(full.size(), ref.size());
  for (const auto& [k, v] : ref) {
    ASSERT_TRUE(full.count(k)) << k;
    EXPECT_TRUE(torch::allclose(full.at(k).to(torch::kDouble), v.to(torch::kDouble), 1e-6, 1e-9)) << k;
  }
  // Re-sharding: the unsharded state loaded into a fresh ZeRO-1 run continues as the unsharded run.
  Net c(comm->rank());
  auto resharded = ht::train::make_data_parallel(*c.model, *comm, cfg);
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < c.params().size(); ++i) c.params()[i].copy_(a.params()[i]);
  }
  resharded->load_optimizer_state(ref);
  for (int s = 5; s < 10; ++s) step(*plain, a, comm->rank(), s, 0), step(*resharded, c, comm->rank(), s, 0);
  EXPECT_LT(relative_gap(c.params(), a.params()), 1e-6);
}

TEST(LocalSgdStreaming, EachFragmentIsExchangedOnceAtItsOwnStep) {
  auto comm = ht::comm::make_mpi_world();
  auto l = local(4);
  l.fragments = 2;
  Net net(comm->rank());
  auto dp = ht::train::make_data_parallel(*net.model, *comm, config_of(l, 0, /*sgd=*/true));
  auto& lsgd = dynamic_cast<ht::train::LocalSgd&>(*dp);
  ASSERT_EQ(lsgd.num_fragments(), 2u);
  const auto [b0, e0] = lsgd.fragment_range(0);
  const auto [b1, e1] = lsgd.fragment_range(1);
  EXPECT_EQ(b0, 0);
  EXPECT_EQ(e0, b1);  // the ranges partition the layout: every value belongs to one fragment
  EXPECT_GE(e1, 58);
  EXPECT_EQ(lsgd.fragment_step(0), 2);
  EXPECT_EQ(lsgd.fragment_step(1), 4);
  for (int s = 0; s < 8; ++s) {
    step(lsgd, net, comm->rank(), s, 0);
    const int cycle_step = s % 4 + 1;
    // Just after its exchange a fragment agrees on every rank; the other has local steps since its own.
    if (cycle_step == 2) {
      EXPECT_TRUE(range_agrees(*comm, net.params(), b0, e0)) << "step " << s + 1;
      EXPECT_FALSE(range_agrees(*comm, net.params(), b1, e1)) << "step " << s + 1;
    } else if (cycle_step == 4) {
      EXPECT_TRUE(range_agrees(*comm, net.params(), b1, e1)) << "step " << s + 1;
      EXPECT_FALSE(range_agrees(*comm, net.params(), b0, e0)) << "step " << s + 1;
    }
  }
  EXPECT_EQ(lsgd.stats().fragment_syncs, 4);  // 2 fragments x 2 cycles
  EXPECT_EQ(lsgd.stats().syncs, 4);           // 4 rounds (one fragment each)
  EXPECT_LE(lsgd.stats().peak_bytes_per_exchange, static_cast<uint64_t>(e1 / 2 * 4));
  dp->finish();
  expect_replicas_equal(*comm, net.params());
}

TEST(LocalSgdQuantized, Int8AndInt4StayCloseToFp32AndReplicasAgree) {
  auto comm = ht::comm::make_mpi_world();
  const Outcome fp32 = train(*comm, config_of(local(4), 0, true), 12);
  for (auto [dt, tol] : {std::pair{ht::config::ExchangeDtype::kInt8, 2e-2}, std::pair{ht::config::ExchangeDtype::kInt4, 0.2}}) {
    auto l = local(4);
    l.comm_dtype = dt;
    l.quant_block = 16;
    const Outcome q = train(*comm, config_of(l, 0, true), 12);
    EXPECT_LT(relative_gap(q.params, fp32.params), tol) << ht::config::name_of(dt);
    expect_replicas_equal(*comm, q.params);
  }
}

TEST(LocalSgdQuantized, BytesPerExchangeAreTheEncodedSize) {
  auto comm = ht::comm::make_mpi_world();
  for (auto dt : {ht::config::ExchangeDtype::kFp32, ht::config::ExchangeDtype::kInt8, ht::config::ExchangeDtype::kInt4}) {
    auto l = local(2);
    l.comm_dtype = dt;
    l.quant_block = 16;
    Net net(comm->rank());
    auto dp = ht::train::make_data_parallel(*net.model, *comm, config_of(l, 0, true));
    for (int s = 0; s < 2; ++s) step(*dp, net, comm->rank(), s, 0);
    const int64_t unit = comm->size() * (dt == ht::config::ExchangeDtype::kFp32 ? 1 : 16);
    const uint64_t padded = static_cast<uint64_t>((58 + unit - 1) / unit * unit);
    const uint64_t want = dt == ht::config::ExchangeDtype::kFp32   ? 4 * padded
                          : dt == ht::config::ExchangeDtype::kInt8 ? padded + 4 * padded / 16
                                                                   : padded / 2 + 4 * padded / 16;
    EXPECT_EQ(dp->stats().bytes_last_sync, want) << ht::config::name_of(dt);
  }
}

// Saves and evaluations read averaged_copies(): with fragments in flight (overlapped, DiLoCo,
// int8) it must be bitwise what finish() then makes of the replicas, and change nothing.
TEST(LocalSgdStreaming, AveragedCopiesWithExchangesInFlightAreWhatFinishGives) {
  auto comm = ht::comm::make_mpi_world();
  auto l = local(4);
  l.fragments = 2;
  l.overlap_steps = 1;
  l.outer = ht::config::OuterOptimizer::kDiloco;
  l.comm_dtype = ht::config::ExchangeDtype::kInt8;
  l.quant_block = 16;
  for (int stop : {3, 5}) {  // fragment 0 in flight at step 3; fragment 1 (from step 4) at step 5
    Net net(comm->rank());
    auto dp = ht::train::make_data_parallel(*net.model, *comm, config_of(l, 0, true));
    for (int s = 0; s < stop; ++s) step(*dp, net, comm->rank(), s, 0);
    ASSERT_TRUE(dp->replicas_differ());
    std::vector<torch::Tensor> own;
    for (auto& p : net.params()) own.push_back(p.detach().clone());
    const auto view = dp->averaged_copies();
    for (size_t i = 0; i < own.size(); ++i) EXPECT_TRUE(torch::equal(own[i], net.params()[i])) << "view changed the replica";
    dp->finish();
    for (size_t i = 0; i < own.size(); ++i)
      EXPECT_TRUE(torch::equal(view[i], net.params()[i])) << "stop " << stop << " tensor " << i;
    expect_replicas_equal(*comm, net.params());
  }
}

TEST(Hierarchical, TwoGroupsOfTwoWithNEqualsOneEqualFlatPerStepAveraging) {
  auto comm = ht::comm::make_mpi_world();
  if (comm->size() != 4) GTEST_SKIP() << "needs 4 ranks (2 groups of 2)";
  const Outcome flat = train(*comm, config_of(LocalSgdConfig{}, 0, true), 6);
  auto l = local(1);
  l.group_size = 2;
  const Outcome hier = train(*comm, config_of(l, 0, true), 6);
  EXPECT_LT(relative_gap(hier.params, flat.params), 1e-5);
  expect_replicas_equal(*comm, hier.params);
}

TEST(Hierarchical, StreamedQuantizedOverlappedGroupsAgreeAndViewEqualsFinish) {
  auto comm = ht::comm::make_mpi_world();
  if (comm->size() != 4) GTEST_SKIP() << "needs 4 ranks (2 groups of 2)";
  auto l = local(4);
  l.group_size = 2;
  l.fragments = 2;
  l.overlap_steps = 1;
  l.comm_dtype = ht::config::ExchangeDtype::kInt4;
  l.quant_block = 16;
  Net net(comm->rank());
  auto dp = ht::train::make_data_parallel(*net.model, *comm, config_of(l, 0, true));
  for (int s = 0; s < 7; ++s) step(*dp, net, comm->rank(), s, 0);
  // Inside a group the replicas move in lockstep (gradients averaged every step).
  auto group_peer_equal = [&] {
    std::vector<torch::Tensor> flat;
    for (auto& p : net.params()) flat.push_back(p.detach().reshape({-1}));
    auto mine = torch::cat(flat).contiguous();
    auto all = torch::empty({comm->size(), mine.numel()});
    comm->allgather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()) * 4);
    return torch::equal(all[comm->rank() ^ 1], mine);
  };
  EXPECT_TRUE(group_peer_equal());
  const auto view = dp->averaged_copies();
  dp->finish();
  for (size_t i = 0; i < view.size(); ++i) EXPECT_TRUE(torch::equal(view[i], net.params()[i])) << "tensor " << i;
  expect_replicas_equal(*comm, net.params());
  EXPECT_GT(dp->stats().inner_bytes_sent, 0u);
}

// ZeRO-1 inside the groups: each group of 2 is one replica whose optimizer state is split over its
// 2 ranks. The run follows the unsharded hierarchical run through the warmup (the group's reduced
// shard averaged again across the groups: the world's mean summed in another order, hence 1e-6
// rather than bitwise) and the streamed DiLoCo exchanges across groups; a wrong shard, a missed
// all-gather or a skipped warmup average would be off by orders of magnitude more.
TEST(Hierarchical, ShardedOptimizerInsideGroupsFollowsUnsharded) {
  auto comm = ht::comm::make_mpi_world();
  if (comm->size() != 4) GTEST_SKIP() << "needs 4 ranks (2 groups of 2)";
  auto l = local(4);
  l.group_size = 2;
  l.warmup_steps = 2;
  l.fragments = 2;
  l.outer = ht::config::OuterOptimizer::kDiloco;
  auto cfg = config_of(l);
  cfg.train.optimizer_impl = ht::config::OptimizerImpl::kForeach;
  Net a(comm->rank()), b(comm->rank());
  auto plain = ht::train::make_data_parallel(*a.model, *comm, cfg);
  cfg.train.shard_optimizer = true;
  auto sharded = ht::train::make_data_parallel(*b.model, *comm, cfg);
  EXPECT_NE(sharded->describe().find("ZeRO-1 over 2 ranks"), std::string::npos) << sharded->describe();
  for (int s = 0; s < 11; ++s) {
    const double na = step(*plain, a, comm->rank(), s, 0), nb = step(*sharded, b, comm->rank(), s, 0);
    EXPECT_NEAR(nb, na, 1e-6 * na) << "step " << s;
  }
  // Mid-cycle (11 = 2 warmup + 9 local steps): the replicas differ across groups, agree inside.
  EXPECT_TRUE(sharded->replicas_differ());
  EXPECT_LT(relative_gap(b.params(), a.params()), 1e-6) << "before finish";
  // Each rank holds half of its replica's state; the pair of a group holds all of it.
  const int64_t whole = plain->optimizer().state_bytes();
  const int64_t mine = sharded->optimizer().state_bytes();
  EXPECT_LE(mine, (58 + 1) / 2 * 2 * 4);
  EXPECT_EQ(comm->allreduce_sum(mine), 2 * whole);  // 2 replicas, each value's state on one rank of each
  EXPECT_GT(sharded->stats().inner_bytes_sent, 0u);
  // The state a checkpoint holds: the group's shards gathered into the unsharded layout.
  const auto full = sharded->optimizer_state();
  const auto ref = plain->optimizer_state();
  ASSERT_EQ(full.size(), ref.size());
  for (const auto& [k, v] : ref) {
    ASSERT_TRUE(full.count(k)) << k;
    EXPECT_TRUE(torch::allclose(full.at(k).to(torch::kDouble), v.to(torch::kDouble), 1e-5, 1e-9)) << k;
  }
  plain->finish();
  sharded->finish();
  EXPECT_LT(relative_gap(b.params(), a.params()), 1e-6);
  expect_replicas_equal(*comm, b.params());
}

// local_sgd.optimizer_state = average with ZeRO-1 in the groups: rank i of every group holds shard i
// of its replica's moments, so averaging them across the groups (on the same communicator as the
// parameters' slices) averages like for like.
TEST(Hierarchical, ShardedMomentsAveragedAcrossGroupsFollowUnsharded) {
  auto comm = ht::comm::make_mpi_world();
  if (comm->size() != 4) GTEST_SKIP() << "needs 4 ranks (2 groups of 2)";
  auto l = local(3);
  l.group_size = 2;
  l.optimizer_state = ht::config::OptimizerState::kAverage;
  auto cfg = config_of(l);
  cfg.train.optimizer_impl = ht::config::OptimizerImpl::kForeach;
  const Outcome plain = train(*comm, cfg, 9);
  cfg.train.shard_optimizer = true;
  const Outcome sharded = train(*comm, cfg, 9);
  EXPECT_LT(relative_gap(sharded.params, plain.params), 1e-6);
  expect_replicas_equal(*comm, sharded.params);
}
