// The best evaluation of a run and early stopping: which evaluation improved
// checkpoint.best_metric (its checkpoint is then kept as the best one), and whether
// train.early_stopping_patience evaluations in a row have passed without an improvement larger than
// train.early_stopping_threshold. Its state travels in the checkpoint ("best/..." values) so a
// resumed run continues the same count and best value.
#pragma once
#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "train/evaluate.h"

namespace ht::train {

// The value of a metric in an evaluation result.
double metric_value(const EvalResult& r, config::EvalMetric metric);

class BestTracker {
 public:
  explicit BestTracker(const config::Config& cfg);

  struct Verdict {
    bool new_best = false;  // strictly better than every earlier evaluation
    bool stop = false;      // patience exhausted (early stopping on), or train.target_eval_loss reached
  };
  // Records the evaluation at `step`. A non-finite value never improves.
  Verdict observe(const EvalResult& r, int64_t step);
  // Why the run stops: "early stopping: eval_loss has not improved by more than T for P evaluations (best X at step S)".
  std::string stop_reason() const;

  // Into / from a checkpoint. A checkpoint without these values (written before them, or with
  // another best_metric) starts a fresh count: they are optional, not part of the format's core.
  void store(checkpoint::Snapshot& s) const;
  void restore(const checkpoint::Snapshot& s);

  bool has_best() const { return has_best_; }
  double best() const { return best_; }
  int64_t best_step() const { return best_step_; }
  int64_t evals_without_improvement() const { return evals_without_improvement_; }

 private:
  config::EvalMetric metric_;
  bool greater_is_better_;
  int64_t patience_;
  double target_loss_ = 0.0;     // train.target_eval_loss
  bool target_reached_ = false;
  double reached_loss_ = 0.0;
  int64_t reached_step_ = 0;
  double threshold_;
  bool has_best_ = false;
  double best_ = 0.0;
  int64_t best_step_ = 0;
  int64_t evals_without_improvement_ = 0;
};

}  // namespace ht::train
