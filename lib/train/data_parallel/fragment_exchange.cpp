// One fragment's exchange across groups (see fragment_exchange.h).
#include "train/data_parallel/fragment_exchange.h"

#include <exception>

#include "comm/agree.h"
#include "core/error.h"
#include "core/log.h"

namespace ht::train {

comm::OuterStepFactors OuterRule::factors() const {
  return comm::OuterStepFactors{static_cast<float>(lr), static_cast<float>(momentum), nesterov};
}

void OuterRule::apply(torch::Tensor& global, torch::Tensor& momentum_buf, const torch::Tensor& g) const {
  comm::outer_step(global, momentum_buf, g, torch::Tensor(), factors());
}

FragmentExchange::FragmentExchange(const FragmentSetup& setup) : setup_(setup) {
  const int64_t len = setup_.end - setup_.begin;
  part_numel_ = len / setup_.group.size();  // the layout is padded so that every fragment splits evenly
  part_begin_ = setup_.begin + setup_.group.rank() * part_numel_;
  if (!setup_.whole) {
    const auto like = torch::empty({part_numel_}, setup_.layout.flat().options());
    own_ = std::make_unique<comm::ParamAverager>(setup_.cross, std::vector<torch::Tensor>{like}, setup_.exchange);
  }
  if (setup_.overlapped) {
    snapshot_ = torch::zeros_like(xchg().flat());
  } else {
    // Allocated once: a sync makes no allocation of its own for the drift.
    sample_ = sampled(xchg().flat()).contiguous().clone();
    drift_scratch_ = torch::empty_like(sample_);
  }
  sample_scale_ = static_cast<double>(part_numel_) / static_cast<double>(std::max<int64_t>(1, sampled(xchg().flat()).numel()));
  if (setup_.outer) {
    global_ = torch::zeros_like(xchg().flat());
    momentum_ = torch::zeros_like(xchg().flat());
    reset_outer();
  }
}

// The first 1024 of every 16 x 1024 values of the part (all of a part shorter than that).
torch::Tensor FragmentExchange::sampled(const torch::Tensor& part) const {
  constexpr int64_t kBlock = 1024, kEvery = 16;
  const int64_t rows = part_numel_ / (kBlock * kEvery);
  if (rows == 0) return part.narrow(0, 0, part_numel_);
  return part.narrow(0, 0, rows * kBlock * kEvery).view({rows, kBlock * kEvery}).narrow(1, 0, kBlock);
}

FragmentExchange::~FragmentExchange() = default;

torch::Tensor FragmentExchange::part_of(const torch::Tensor& full) const {
  return full.narrow(0, part_begin_, part_numel_);
}

void FragmentExchange::take_local() {
  if (setup_.whole) return setup_.layout.pack(setup_.tensors);
  setup_.layout.pack_range(setup_.tensors, part_begin_, part_begin_ + part_numel_);
  own_->flat().narrow(0, 0, part_numel_).copy_(part_of(setup_.layout.flat()));
}

void FragmentExchange::reset_outer(bool keep_momentum) {
  if (!setup_.outer) return;
  take_local();
  global_.copy_(xchg().flat());
  if (!keep_momentum) momentum_.zero_();
}

void FragmentExchange::begin(bool blocking) {
  HT_REQUIRE(!pending_, ExitCode::kRuntime, "local SGD: a fragment's exchange began while one was in flight");
  take_local();
  auto& flat = xchg().flat();
  if (snapshot_.defined())
    snapshot_.copy_(flat);
  else
    sample_.copy_(sampled(flat));
  if (setup_.outer) torch::sub_out(flat, global_, flat);  // the pseudo-gradient: global - local
  if (blocking) {
    xchg().allreduce_mean(mean_bit_sum());
    finish_exchange(/*overlapped=*/false);
    return;
  }
  xchg().start_mean();
  pending_ = true;
  mean_ready_ = false;
}

void FragmentExchange::progress() {
  if (pending_ && !mean_ready_) xchg().test_mean();
}

void FragmentExchange::complete() {
  HT_REQUIRE(pending_, ExitCode::kRuntime, "local SGD: complete() without an exchange in flight");
  if (mean_ready_)
    mean_bit_sum_.reset();  // the mean came some other way (average_into, a restored checkpoint): read it
  else
    xchg().wait_mean(mean_bit_sum());
  finish_exchange(/*overlapped=*/true);
}

// Where the exchange's mean is the target (plain averaging), the 1/W pass adds up its bit sum.
// Any earlier exchange's sum is dropped here, so none can be checked against this mean.
int64_t* FragmentExchange::mean_bit_sum() {
  if (setup_.outer) {
    mean_bit_sum_.reset();
    return nullptr;
  }
  mean_bit_sum_ = 0;
  return &*mean_bit_sum_;
}

// |p_r - mean|^2 of this rank's part: plain averaging has the mean in flat; the outer rule has the
// mean pseudo-gradient g there, and p_r - mean(p) = g - (global - p_r).
double FragmentExchange::drift_squared() const {
  const auto& flat = xchg().flat();
  if (snapshot_.defined()) {
    auto diff = setup_.outer ? (global_ - snapshot_).sub_(flat) : snapshot_ - flat;
    return diff.square().sum(torch::kDouble).item<double>();
  }
  torch::Tensor diff = drift_scratch_;  // a handle: the writes land in the member
  if (setup_.outer)
    torch::sub_out(diff, sampled(global_), sample_).sub_(sampled(flat));
  else
    torch::sub_out(diff, sample_, sampled(flat));
  return diff.square_().sum(torch::kDouble).item<double>() * sample_scale_;
}

// The mean is in flat: the target is it, or the outer copy after the outer step. Blocking: the
// target replaces the local values. Overlapped: the local values moved on since the snapshot, so
// target - snapshot is added (the local progress is kept); the target itself must agree bitwise.
void FragmentExchange::finish_exchange(bool overlapped) {
  drift_sq_ = drift_squared();
  auto& flat = xchg().flat();
  if (!overlapped && setup_.outer && tensors_in_flat()) {
    // The tensors are the exchange buffer, which now holds the mean pseudo-gradient g: the outer
    // step, the copy of the outer values into the tensors and the checksum's read in one pass.
    int64_t bits = 0;
    comm::outer_step(global_, momentum_, flat, flat, setup_.rule.factors(), &bits);
    mean_bit_sum_ = bits;
    pending_ = false;
    mean_ready_ = false;
    check_consistency(global_);
    return;
  }
  if (setup_.outer) setup_.rule.apply(global_, momentum_, flat);
  const torch::Tensor& target = setup_.outer ? global_ : flat;
  pending_ = false;
  mean_ready_ = false;
  if (overlapped) {
    check_consistency(target);
    apply(target - snapshot_, /*add=*/true);
  } else {
    apply(target, /*add=*/false);  // reads the target, never writes it: its bit sum stays valid
    check_consistency(target);
  }
}

// Whole-layout exchanges whose tensors live in the layout's buffer (see LocalSgd: blocking ones).
bool FragmentExchange::tensors_in_flat() const {
  if (!setup_.whole) return false;
  for (size_t i = 0; i < setup_.tensors.size(); ++i)
    if (!setup_.layout.is_bound(setup_.tensors[i], i)) return false;
  return true;
}

void FragmentExchange::apply(const torch::Tensor& part, bool add) {
  auto& layout = setup_.layout;
  if (setup_.whole) return layout.unpack(setup_.tensors, part, add);
  const int64_t len = setup_.end - setup_.begin;
  torch::Tensor fragment;
  if (add) {
    // The deltas of every part, gathered in a scratch copy, then added to the local values.
    fragment = torch::empty({len}, part.options());
    fragment.narrow(0, part_begin_ - setup_.begin, part_numel_).copy_(part.narrow(0, 0, part_numel_));
  } else {
    part_of(layout.flat()).copy_(part.narrow(0, 0, part_numel_));
    fragment = layout.flat().narrow(0, setup_.begin, len);
  }
  gather_parts(fragment);
  layout.unpack_range(setup_.tensors, setup_.begin, setup_.end, fragment, add);
}

// fragment: the fragment's range of a layout-sized buffer holding this rank's part; afterwards it
// holds every part of the group (in place).
void FragmentExchange::gather_parts(const torch::Tensor& fragment) const {
  if (setup_.group.size() == 1) return;
  auto* base = fragment.data_ptr<float>();
  setup_.group.allgather(base + (part_begin_ - setup_.begin), base, static_cast<size_t>(part_numel_) * 4);
}

// The checksum check and the drift's sum over the replicas share one small collective; inside a
// group the parts' sums are then added (every rank holds a different part).
void FragmentExchange::check_consistency(const torch::Tensor& target) {
  checksum_ = mean_bit_sum_ ? comm::checksum_of_bit_sum(*mean_bit_sum_, target.numel()) : comm::checksum({target});
  const double across = setup_.consistency_check
                            ? comm::require_agreement_summing(setup_.cross, checksum_, drift_sq_, ExitCode::kRuntime,
                                                              "consistency check failed after local SGD exchange of " +
                                                                  setup_.exchange.name + ": replicas differ from rank 0")
                            : setup_.cross.allreduce_sum(drift_sq_);
  world_drift_sq_ = setup_.group.size() > 1 ? setup_.group.allreduce_sum(across) : across;
}

void FragmentExchange::average_into(torch::Tensor& values, bool more_steps) {
  torch::NoGradGuard no_grad;
  auto part = part_of(values);
  torch::Tensor g, m;
  if (setup_.outer) g = global_.clone(), m = momentum_.clone();
  if (pending_) {
    if (!mean_ready_) xchg().wait_mean();  // the transfer ends now; the values it delivers are the same
    mean_ready_ = true;
    if (setup_.outer) setup_.rule.apply(g, m, xchg().flat());
    const auto& target = setup_.outer ? g : xchg().flat();
    part.add_((target - snapshot_).narrow(0, 0, part_numel_));
  }
  if (more_steps) {
    if (!view_) {
      auto like = torch::empty({xchg().flat().numel()}, values.options());
      view_ = std::make_unique<comm::ParamAverager>(setup_.cross, std::vector<torch::Tensor>{like}, setup_.exchange);
    }
    auto& flat = view_->flat();
    flat.narrow(0, 0, part_numel_).copy_(part);
    if (setup_.outer) torch::sub_out(flat, g, flat);
    view_->allreduce_mean();
    if (setup_.outer) setup_.rule.apply(g, m, flat);
    part.copy_((setup_.outer ? g : flat).narrow(0, 0, part_numel_));
  }
  if (!setup_.whole) gather_parts(values.narrow(0, setup_.begin, setup_.end - setup_.begin));
}

int64_t FragmentExchange::saved_numel() const { return setup_.whole ? setup_.layout.numel() : part_numel_; }

void FragmentExchange::gather_outer(torch::Tensor& global_full, torch::Tensor& momentum_full) {
  if (!setup_.outer) return;
  for (auto [src, dst] : {std::pair{&global_, &global_full}, std::pair{&momentum_, &momentum_full}}) {
    part_of(*dst).copy_(src->narrow(0, 0, part_numel_));
    if (!setup_.whole) gather_parts(dst->narrow(0, setup_.begin, setup_.end - setup_.begin));
  }
}

void FragmentExchange::restore_outer(const torch::Tensor& global_full, const torch::Tensor& momentum_full) {
  if (!setup_.outer) return;
  global_.narrow(0, 0, part_numel_).copy_(part_of(global_full));
  momentum_.narrow(0, 0, part_numel_).copy_(part_of(momentum_full));
}

std::map<std::string, torch::Tensor> FragmentExchange::pending_state() {
  if (!pending_) return {};
  if (!mean_ready_) xchg().wait_mean();  // the transfer ends now instead of later; same values
  mean_ready_ = true;
  const int64_t n = saved_numel();
  return {{"snapshot", snapshot_.narrow(0, 0, n).detach().cpu().clone()},
          {"pending_mean", xchg().flat().narrow(0, 0, n).detach().cpu().clone()}};
}

void FragmentExchange::restore_pending(const torch::Tensor& snapshot, const torch::Tensor& mean) {
  const int64_t n = saved_numel();
  HT_REQUIRE(snapshot.numel() == n && mean.numel() == n, ExitCode::kData,
             "local SGD: the checkpoint's exchange in flight has {} values, this run's part has {}", snapshot.numel(), n);
  snapshot_.narrow(0, 0, n).copy_(snapshot.reshape({-1}));
  xchg().flat().narrow(0, 0, n).copy_(mean.reshape({-1}));
  pending_ = true;
  mean_ready_ = true;
}

}  // namespace ht::train
