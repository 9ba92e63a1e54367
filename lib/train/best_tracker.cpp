#include "train/best_tracker.h"

#include <cmath>

#include "core/log.h"

namespace ht::train {

double metric_value(const EvalResult& r, config::EvalMetric metric) {
  switch (metric) {
    case config::EvalMetric::kEvalLoss: return r.loss;
    case config::EvalMetric::kEvalAccuracy: return r.accuracy;
    case config::EvalMetric::kEvalF1: return r.f1;
    case config::EvalMetric::kEvalPerplexity: return r.perplexity;
  }
  return r.loss;
}

BestTracker::BestTracker(const config::Config& cfg)
    : metric_(cfg.checkpoint.best_metric),
      greater_is_better_(cfg.greater_is_better()),
      patience_(cfg.train.early_stopping_patience),
      target_loss_(cfg.train.target_eval_loss),
      threshold_(cfg.train.early_stopping_threshold) {}

BestTracker::Verdict BestTracker::observe(const EvalResult& r, int64_t step) {
  const double v = metric_value(r, metric_);
  Verdict out;
  if (!std::isfinite(v)) {
    ++evals_without_improvement_;
  } else {
    const double gain = !has_best_ ? INFINITY : greater_is_better_ ? v - best_ : best_ - v;
    // The best checkpoint follows every strict improvement; patience is reset only by one larger
    // than the threshold, so a creeping metric still stops.
    out.new_best = gain > 0;
    if (gain > threshold_) evals_without_improvement_ = 0;
    else ++evals_without_improvement_;
    if (out.new_best) {
      has_best_ = true;
      best_ = v;
      best_step_ = step;
    }
  }
  out.stop = patience_ > 0 && evals_without_improvement_ >= patience_;
  if (target_loss_ > 0 && std::isfinite(r.loss) && r.loss <= target_loss_ && !target_reached_) {
    target_reached_ = true;
    reached_loss_ = r.loss;
    reached_step_ = step;
  }
  out.stop = out.stop || target_reached_;
  return out;
}

std::string BestTracker::stop_reason() const {
  if (target_reached_)
    return fmt::format("target reached: eval_loss {:.6g} <= train.target_eval_loss = {:.6g} at step {}", reached_loss_,
                       target_loss_, reached_step_);
  return fmt::format("early stopping: {} has not improved by more than {} for {} evaluations (best {:.6g} at step {})",
                     config::name_of(metric_), threshold_, evals_without_improvement_, best_, best_step_);
}

void BestTracker::store(checkpoint::Snapshot& s) const {
  s.strings["best/metric"] = std::string(config::name_of(metric_));
  s.ints["best/has_value"] = has_best_ ? 1 : 0;
  s.reals["best/value"] = best_;
  s.ints["best/step"] = best_step_;
  s.ints["best/evals_without_improvement"] = evals_without_improvement_;
}

void BestTracker::restore(const checkpoint::Snapshot& s) {
  const auto metric = s.strings.find("best/metric");
  const auto has = s.ints.find("best/has_value"), step = s.ints.find("best/step"),
             count = s.ints.find("best/evals_without_improvement");
  const auto value = s.reals.find("best/value");
  if (metric == s.strings.end() || has == s.ints.end() || step == s.ints.end() || count == s.ints.end() ||
      value == s.reals.end()) {
    HT_INFO("checkpoint {} holds no best-evaluation state: the best value and the patience count start afresh",
            s.path);
    return;
  }
  if (metric->second != config::name_of(metric_)) {
    HT_WARN("checkpoint {} tracked {} as its best metric, this run tracks {}: the best value and the patience count "
            "start afresh", s.path, metric->second, config::name_of(metric_));
    return;
  }
  has_best_ = has->second != 0;
  best_ = value->second;
  best_step_ = step->second;
  evals_without_improvement_ = count->second;
}

}  // namespace ht::train
