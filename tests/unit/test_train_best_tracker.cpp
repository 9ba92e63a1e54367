// BestTracker: which evaluations are new bests, when patience stops a run, and that its state
// survives a checkpoint round trip (resume) but not a change of the tracked metric.
#include <gtest/gtest.h>

#include "config/config.h"
#include "train/best_tracker.h"

namespace {
using ht::train::BestTracker;
using ht::train::EvalResult;

EvalResult loss(double v) {
  EvalResult r;
  r.loss = v;
  return r;
}

ht::config::Config cfg(int64_t patience, double threshold) {
  ht::config::Config c;
  c.train.early_stopping_patience = patience;
  c.train.early_stopping_threshold = threshold;
  return c;
}
}  // namespace

TEST(BestTracker, LowerLossIsBetterAndPatienceCountsEvaluationsWithoutImprovement) {
  BestTracker t(cfg(2, 0.0));
  EXPECT_TRUE(t.observe(loss(3.0), 10).new_best);
  EXPECT_TRUE(t.observe(loss(2.5), 20).new_best);
  auto v = t.observe(loss(2.6), 30);
  EXPECT_FALSE(v.new_best);
  EXPECT_FALSE(v.stop);
  v = t.observe(loss(2.5), 40);  // equal is no improvement
  EXPECT_FALSE(v.new_best);
  EXPECT_TRUE(v.stop);
  EXPECT_EQ(t.best_step(), 20);
  EXPECT_DOUBLE_EQ(t.best(), 2.5);
  EXPECT_NE(t.stop_reason().find("eval_loss has not improved by more than 0 for 2 evaluations (best 2.5 at step 20)"),
            std::string::npos)
      << t.stop_reason();
}

TEST(BestTracker, SmallImprovementsMoveTheBestButDoNotResetPatience) {
  BestTracker t(cfg(2, 0.1));
  t.observe(loss(3.0), 1);
  auto v = t.observe(loss(2.95), 2);
  EXPECT_TRUE(v.new_best);
  EXPECT_FALSE(v.stop);
  v = t.observe(loss(2.9), 3);
  EXPECT_TRUE(v.new_best);
  EXPECT_TRUE(v.stop);
  EXPECT_FALSE(t.observe(loss(NAN), 4).new_best);
}

TEST(BestTracker, AccuracyDefaultsToGreaterIsBetter) {
  auto c = cfg(0, 0.0);
  c.checkpoint.best_metric = ht::config::EvalMetric::kEvalAccuracy;
  EXPECT_TRUE(c.greater_is_better());
  BestTracker t(c);
  EvalResult r;
  r.accuracy = 0.5;
  EXPECT_TRUE(t.observe(r, 1).new_best);
  r.accuracy = 0.4;
  EXPECT_FALSE(t.observe(r, 2).new_best);
  EXPECT_FALSE(t.observe(r, 3).stop);  // patience 0 = off
  c.checkpoint.greater_is_better = ht::config::AutoBool::kFalse;
  EXPECT_FALSE(c.greater_is_better());
}

TEST(BestTracker, StateSurvivesACheckpointButNotAnotherMetric) {
  BestTracker a(cfg(3, 0.0));
  a.observe(loss(2.0), 5);
  a.observe(loss(2.2), 10);
  ht::checkpoint::Snapshot s;
  a.store(s);
  BestTracker b(cfg(3, 0.0));
  b.restore(s);
  EXPECT_TRUE(b.has_best());
  EXPECT_EQ(b.best_step(), 5);
  EXPECT_EQ(b.evals_without_improvement(), 1);
  EXPECT_TRUE(b.observe(loss(2.3), 15).new_best == false);
  EXPECT_TRUE(b.observe(loss(2.3), 20).stop);

  auto other = cfg(3, 0.0);
  other.checkpoint.best_metric = ht::config::EvalMetric::kEvalAccuracy;
  BestTracker c(other);
  c.restore(s);
  EXPECT_FALSE(c.has_best());
  BestTracker d(cfg(3, 0.0));
  d.restore(ht::checkpoint::Snapshot{});  // a checkpoint from before these values
  EXPECT_FALSE(d.has_best());
  EXPECT_EQ(d.evals_without_improvement(), 0);
}
