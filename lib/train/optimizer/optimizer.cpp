// The optimizer base: parameter groups, per-tensor moment state, and the factory of train.optimizer.
#include "train/optimizer/optimizer.h"

#include "core/error.h"
#include "train/optimizer/adamw.h"
#include "train/optimizer/sgd.h"

namespace ht::train {

namespace {

std::vector<torch::optim::OptimizerParamGroup> make_groups(const std::vector<OptimizerParam>& params,
                                                           const config::TrainConfig& cfg) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : params) (p.decay ? decay : no_decay).push_back(p.tensor);
  auto with = std::make_unique<GroupOptions>();
  with->lr = cfg.lr;
  with->weight_decay = cfg.weight_decay;
  auto without = std::make_unique<GroupOptions>();
  without->lr = cfg.lr;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::move(with));
  groups.emplace_back(no_decay, std::move(without));
  return groups;
}

std::unique_ptr<GroupOptions> default_options(const config::TrainConfig& cfg) {
  auto d = std::make_unique<GroupOptions>();
  d->lr = cfg.lr;
  return d;
}

}  // namespace

Optimizer::Optimizer(std::vector<OptimizerParam> params, const config::TrainConfig& cfg)
    : torch::optim::Optimizer(make_groups(params, cfg), default_options(cfg)), params_(std::move(params)), cfg_(cfg) {}

Optimizer::Batch Optimizer::prepare(torch::optim::OptimizerParamGroup& group) {
  Batch b;
  const size_t kinds = moment_names().size();
  b.moments.resize(kinds);
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto& slot = state()[p.unsafeGetTensorImpl()];
    if (!slot) {
      auto st = std::make_unique<MomentState>();
      for (size_t k = 0; k < kinds; ++k) st->moments.push_back(torch::zeros_like(p, at::MemoryFormat::Preserve));
      slot = std::move(st);
    }
    auto& st = static_cast<MomentState&>(*slot);
    st.step += 1;
    b.params.push_back(p);
    b.grads.push_back(p.grad());
    for (size_t k = 0; k < kinds; ++k) b.moments[k].push_back(st.moments[k]);
    b.steps.push_back(st.step);
  }
  return b;
}

torch::Tensor Optimizer::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    Batch b = prepare(group);
    if (!b.params.empty()) update(b, static_cast<const GroupOptions&>(group.options()));
  }
  return loss;
}

const MomentState* Optimizer::state_of(const torch::Tensor& t) const {
  auto it = state().find(t.unsafeGetTensorImpl());
  return it == state().end() ? nullptr : static_cast<const MomentState*>(it->second.get());
}

void Optimizer::set_state(const torch::Tensor& t, std::vector<torch::Tensor> moments, int64_t step) {
  HT_REQUIRE(moments.size() == moment_names().size(), ExitCode::kRuntime,
             "optimizer {}: {} moments given, it keeps {}", config::name_of(kind()), moments.size(),
             moment_names().size());
  auto st = std::make_unique<MomentState>();
  for (auto& m : moments) st->moments.push_back(m.to(t.device()).reshape(t.sizes()).clone());
  st->step = step;
  state()[t.unsafeGetTensorImpl()] = std::move(st);
}

std::vector<torch::Tensor> Optimizer::all_moments() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : params_)
    if (const MomentState* st = state_of(p.tensor))
      for (const auto& m : st->moments) out.push_back(m);
  return out;
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& m : all_moments()) n += m.numel() * static_cast<int64_t>(m.element_size());
  return n;
}

std::unique_ptr<Optimizer> make_optimizer(const config::TrainConfig& cfg, std::vector<OptimizerParam> params) {
  switch (cfg.optimizer) {
    case config::OptimizerKind::kAdamw: return std::make_unique<AdamW>(std::move(params), cfg);
    case config::OptimizerKind::kSgd: return std::make_unique<Sgd>(std::move(params), cfg);
  }
  HT_FAIL(ExitCode::kUsage, "train.optimizer: unknown kind");
}

std::vector<OptimizerParam> optimizer_params(torch::nn::Module& model) {
  std::vector<OptimizerParam> out;
  for (const auto& p : model.named_parameters()) {
    const auto& name = p.key();
    const bool is_embedding = name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0;
    out.push_back({name, p.value(), p.value().dim() == 2 && !is_embedding});
  }
  return out;
}

}  // namespace ht::train
