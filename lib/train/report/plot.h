// Pictures of runs drawn by gnuplot from their metrics.jsonl: loss.png (train and eval loss vs
// optimizer step, tokens seen and training seconds; titled with the run names, model and ranks) and, for classification runs, accuracy.png (eval accuracy and
// macro-F1 per epoch). gnuplot runs as a child process with a time limit (gnuplot.h); without
// gnuplot in PATH nothing is drawn and one line says so. The end of a training run (log.plot) and `hpctrain plot`
// both come here.
#pragma once
#include <string>
#include <vector>

namespace ht::train {

struct PlotOptions {
  std::vector<std::string> run_dirs;          // one curve set per run (labels: distinct_run_labels)
  std::string output_dir;                     // where the PNGs go
  std::string metrics_file = "metrics.jsonl"; // inside each run dir
  double timeout_s = 60.0;                    // gnuplot is killed after this
  bool log_x = false;                         // log-scale x axes: runs of very different lengths
};

// The legend name of each run: the shortest tail of its path that no other run's path ends with
// (runs/a/demo and runs/b/demo -> "a/demo", "b/demo"; one run -> its directory name); the same
// directory given twice gets " #position".
std::vector<std::string> distinct_run_labels(const std::vector<std::string>& run_dirs);

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
