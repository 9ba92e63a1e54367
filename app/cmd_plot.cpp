// `hpctrain plot RUN_DIR [RUN_DIR...] [--output DIR]`: loss.png (and accuracy.png for
// classification) from the runs' metrics.jsonl, drawn by gnuplot; several runs share one picture.
// Rank 0 draws; without gnuplot one line says so and the exit code is 0.
#include <iostream>

#include "app/commands.h"
#include "train/report/plot.h"

namespace ht::app {
namespace {

Phases configure_plot(CLI::App& sub) {
  auto opts = std::make_shared<train::PlotOptions>();
  sub.add_option("run_dirs", opts->run_dirs, "run directories (train.output_dir), each with a metrics.jsonl")
      ->required();
  sub.add_option("--output", opts->output_dir, "directory of the PNGs (created if missing); default: the first run "
                 "directory");
  sub.add_option("--metrics-file", opts->metrics_file, "metrics file name inside each run directory");
  sub.add_option("--timeout", opts->timeout_s, "seconds gnuplot may take");
  sub.add_flag("--log-x", opts->log_x, "log-scale x axes (runs of very different lengths)");
  Phases p;
  // Local work of rank 0 in the set-up phase: its outcome (and message) reaches every rank there,
  // so a bad file or --output is reported once, also under mpirun.
  p.setup = [opts](Context& ctx) {
    if (opts->output_dir.empty()) opts->output_dir = opts->run_dirs.front();
    if (ctx.comm.rank() != 0) return;
    const auto pngs = train::plot_runs(*opts);
    std::string legend;
    for (const auto& label : train::distinct_run_labels(opts->run_dirs)) legend += (legend.empty() ? "" : ", ") + label;
    for (const auto& png : pngs) std::cout << "plot: wrote " << png << " (runs: " << legend << ")\n";
  };
  p.run = [](Context&) { return 0; };
  return p;
}

const Registrar kPlot{Command{"plot", "draw loss (and accuracy) curves of runs with gnuplot", configure_plot}};

}  // namespace
}  // namespace ht::app
