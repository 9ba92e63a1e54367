// Pictures of runs drawn by gnuplot from their metrics.jsonl: loss.png (train and eval loss vs
// optimizer step and vs tokens seen) and, for classification runs, accuracy.png (eval accuracy and
// macro-F1 per epoch). gnuplot runs as a child process with a time limit (gnuplot.h); without
// gnuplot in PATH nothing is drawn and one line says so. The end of a training run (log.plot) and `hpctrain plot`
// both come here.
#pragma once
#include <string>
#include <vector>

namespace ht::train {

struct PlotOptions {
  std::vector<std::string> run_dirs;          // one curve set per run, labelled by its directory name
  std::string output_dir;                     // where the PNGs go
  std::string metrics_file = "metrics.jsonl"; // inside each run dir
  double timeout_s = 60.0;                    // gnuplot is killed after this
};

// Returns the PNGs written (empty when gnuplot is absent: one info line). Creates a missing
// output_dir. Throws ht::Error(kData) naming the file when a metrics file is missing or holds no
// training line, naming --output when output_dir cannot be created or written, and when gnuplot
// fails or times out (gnuplot.h). Metrics lines with a field of the wrong type are skipped with one
// warning per file naming file:line and the field.
std::vector<std::string> plot_runs(const PlotOptions& opts);

// The end of a training run (rank 0): plot_runs on the run's own directory, each PNG named in an
// info line. Never throws: a plot that fails costs the picture (one warning), not the finished run.
void plot_finished_run(const std::string& output_dir, const std::string& metrics_file);

}  // namespace ht::train
