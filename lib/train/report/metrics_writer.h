// The one writer of a run's metrics: each line goes to metrics.jsonl (one JSON object per line)
// and, with log.tensorboard, every numeric value of it to a TensorBoard event file in the run
// directory, so the two can never disagree. Rank 0 only; other ranks hold a disabled writer.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "train/report/tensorboard.h"

namespace ht::train {

class MetricsWriter {
 public:
  // Appends to path (resume keeps earlier lines); enabled = false writes nothing (non-zero ranks).
  // A non-empty tensorboard_dir also writes events.out.tfevents.* there.
  MetricsWriter(const std::string& path, bool enabled, const std::string& tensorboard_dir = "");
  // The line must hold "step"; in TensorBoard each number becomes a scalar at that step, tagged
  // by its JSON path ("loss", "eval_loss", "phase_s/forward/median").
  void write(const nlohmann::json& line);
  // A text entry (TensorBoard only), e.g. the resolved config.
  void text(const std::string& tag, const std::string& text, int64_t step);

 private:
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  bool enabled_;
};

// After a resume from step `step`: drops the lines of later steps (work the crashed run did and
// this one redoes) and a torn last line, so the file holds each step once. Atomic (tmp + rename).
void truncate_metrics(const std::string& path, int64_t step);

}  // namespace ht::train
