// ZeRO-1: sharded optimizer state over flat parameter and gradient buffers (see zero1.h).
#include "train/data_parallel/zero1.h"

#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "train/optimizer/schedule.h"

namespace ht::train {

namespace {

comm::AveragerOptions layout_options(const char* name) {
  comm::AveragerOptions o;
  o.name = name;
  return o;
}

}  // namespace

Zero1::Zero1(torch::nn::Module& model, comm::Communicator& comm, const config::Config& cfg)
    : DataParallel(model, comm, model.parameters()) {
  for (const auto& p : model.named_parameters()) {
    offsets_.push_back(offsets_.empty() ? 0 : offsets_.back() + params_.back().numel());
    params_.push_back(p.value());
    names_.push_back(p.key());
    HT_REQUIRE(p.value().requires_grad(), ExitCode::kUsage,
               "train.shard_optimizer: parameter '{}' is frozen (requires_grad = false); ZeRO-1 here updates every "
               "parameter", p.key());
  }
  param_flat_ = std::make_unique<comm::ParamAverager>(comm_, params_, layout_options("parameters (ZeRO-1)"));
  HT_REQUIRE(param_flat_->bind(params_), ExitCode::kUsage,
             "train.shard_optimizer: the parameters must be fp32 tensors on one device");
  std::vector<torch::Tensor> grads;
  for (auto& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  grad_flat_ = std::make_unique<comm::ParamAverager>(comm_, grads, layout_options("gradients (ZeRO-1)"));
  grad_flat_->bind(grads);
  shard_numel_ = param_flat_->padded_numel() / comm_.size();
  shard_begin_ = comm_.rank() * shard_numel_;
  // The reduce-scatter runs in place: this rank's reduced shard lands at the front of the flat
  // gradient buffer, so the shard needs no buffer of its own (1/W of the model less per rank).
  grad_shard_ = grad_flat_->flat().narrow(0, 0, shard_numel_);
  optimizer_ = make_optimizer(cfg.train, make_pieces());
}

std::vector<OptimizerParam> Zero1::make_pieces() {
  const auto decay = optimizer_params(model_);
  std::vector<OptimizerParam> out;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t a = std::max(shard_begin_, offsets_[i]);
    const int64_t b = std::min(shard_begin_ + shard_numel_, offsets_[i] + params_[i].numel());
    if (a >= b) continue;
    Piece piece{i, a - offsets_[i], a - shard_begin_, b - a};
    // A view of the flat parameter buffer, with its gradient a view of this rank's reduced shard.
    auto view = param_flat_->flat().narrow(0, a, b - a);
    view.mutable_grad() = grad_shard_.narrow(0, piece.offset_in_shard, piece.numel);
    out.push_back({names_[i], view, decay[i].decay});
    pieces_.push_back(piece);
  }
  return out;
}

std::string Zero1::describe() const {
  return fmt::format("ZeRO-1 over {} ranks: gradients reduce-scattered in fp32, {} updates {} of {} values "
                     "(its 1/{} of the optimizer state), parameters all-gathered",
                     comm_.size(), config::name_of(optimizer_->kind()), shard_numel_, param_flat_->numel(),
                     comm_.size());
}

void Zero1::after_backward() {
  Stopwatch sw;
  std::vector<torch::Tensor> grads;
  for (auto& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  grad_flat_->bind(grads);  // gradients that left the buffer (freed by a caller) move back
  float* flat = grad_flat_->flat().data_ptr<float>();
  HT_REQUIRE(grad_shard_.data_ptr<float>() == flat, ExitCode::kRuntime, "ZeRO-1: the gradient buffer moved");
  comm_.reduce_scatter(flat, flat, static_cast<size_t>(shard_numel_));
  grad_shard_.mul_(1.0 / comm_.size());
  stats_.grad_allreduces += 1;
  const auto bytes = static_cast<uint64_t>(param_flat_->padded_numel()) * 4;
  stats_.bytes_per_grad_allreduce = bytes;  // reduce-scatter + all-gather: an all-reduce's payload
  stats_.bytes_sent += bytes;
  stats_.comm_seconds += sw.seconds();
}

double Zero1::clip_and_update(double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : optimizer_->params()) grads.push_back(p.tensor.grad());
  const double norm = std::sqrt(comm_.allreduce_sum(grad_norm_squared(grads)));
  clip_to_norm(grads, norm, max_norm);
  optimizer_->step();
  return norm;
}

void Zero1::after_update() {
  Stopwatch sw;
  auto& flat = param_flat_->flat();
  const auto bytes = static_cast<size_t>(shard_numel_) * 4;
  comm_.allgather(flat.data_ptr<float>() + shard_begin_, flat.data_ptr<float>(), bytes);
  stats_.steps += 1;
  stats_.comm_seconds += sw.seconds();
}

std::map<std::string, torch::Tensor> Zero1::optimizer_state() {
  const auto& names = optimizer_->moment_names();
  const auto& opt_params = optimizer_->params();
  std::vector<int64_t> steps(params_.size(), 0);
  std::vector<torch::Tensor> shards(names.size());
  for (auto& s : shards) s = torch::zeros({shard_numel_}, torch::kFloat);
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const MomentState* st = optimizer_->state_of(opt_params[k].tensor);
    if (!st) continue;
    steps[pieces_[k].param] = st->step;
    for (size_t m = 0; m < names.size(); ++m)
      shards[m].narrow(0, pieces_[k].offset_in_shard, pieces_[k].numel).copy_(st->moments[m].reshape({-1}));
  }
  // Every rank learns every parameter's step count (a parameter's pieces advance together).
  comm_.allreduce(steps.data(), steps.size(), comm::DType::kI64, comm::ReduceOp::kMax);
  std::map<std::string, torch::Tensor> out;
  for (size_t m = 0; m < names.size(); ++m) {
    auto full = torch::empty({shard_numel_ * comm_.size()}, torch::kFloat);
    comm_.allgather(shards[m].data_ptr<float>(), full.data_ptr<float>(), static_cast<size_t>(shard_numel_) * 4);
    for (size_t i = 0; i < params_.size(); ++i)
      if (steps[i] > 0)
        out[names[m] + "/" + names_[i]] = full.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes()).clone();
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (steps[i] > 0) out["step/" + names_[i]] = torch::tensor({steps[i]}, torch::kInt64);
  return out;
}

void Zero1::load_optimizer_state(const std::map<std::string, torch::Tensor>& state) {
  const auto& names = optimizer_->moment_names();
  const auto& opt_params = optimizer_->params();
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const Piece& piece = pieces_[k];
    const std::string& name = names_[piece.param];
    auto step = state.find("step/" + name);
    if (step == state.end()) continue;  // no step of this parameter yet
    std::vector<torch::Tensor> moments;
    for (const auto& m : names) {
      auto it = state.find(m + "/" + name);
      HT_REQUIRE(it != state.end(), ExitCode::kData, "checkpoint optimizer state of '{}' lacks '{}'", name, m);
      moments.push_back(it->second.reshape({-1}).narrow(0, piece.offset_in_param, piece.numel));
    }
    optimizer_->set_state(opt_params[k].tensor, std::move(moments), step->second.item<int64_t>());
  }
}

}  // namespace ht::train
