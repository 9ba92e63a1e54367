// train/report/: how a run is reported, the third axis of train/ beside data_parallel/ (how
// replicas stay in step) and optimizer/ (how a step updates the weights). It owns the console lines
// and metrics.jsonl lines of steps and evaluations (this header), their one writer with the
// TensorBoard events (metrics_writer.h, tensorboard.h), per-phase step timing and its Chrome trace
// (phases.h), loss/accuracy plots through gnuplot (plot.h, gnuplot.h) and text samples during
// training (sample_log.h).
// What it must not do: change the training it reports. It reads results the trainer hands it and
// never writes model, optimizer or loader state, never draws from the run's random streams (a
// sample uses a generator of its own), and takes no decision about the run (when to evaluate,
// checkpoint or stop belongs to the trainer). Files are written by rank 0; its only collectives
// gather phase timings and agree on opening a trace file, on the ranks that all call them.
//
// This header: the console and metrics lines of training steps and evaluations, and the peak
// FLOP/s figure that MFU is measured against.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <fstream>
#include <string>

#include "config/config.h"
#include "train/evaluate.h"
#include "train/data_parallel/data_parallel.h"
#include "train/report/metrics_writer.h"
#include "train/report/phases.h"

namespace ht::train {

// One optimizer step as it is logged.
struct StepReport {
  int64_t step = 0, total_steps = 0;
  double loss = 0.0, lr = 0.0, grad_norm = 0.0;
  double step_seconds = 0.0;
  int64_t global_tokens = 0;   // tokens of this step over all ranks
  int64_t tokens_seen = 0;     // since the start of training
  int64_t peak_step_bytes = 0; // counted tensor memory above the step's start (activations)
  double flops_per_token = 0.0, peak_flops_per_rank = 0.0;
  int world_size = 1;
  PhaseStats phases;
  int64_t optimizer_state_bytes = 0;  // this rank's moments (1/W of them with train.shard_optimizer)
  double train_seconds = 0.0;         // Counters::train_seconds after this step
};

// What the two start-up lines (rank 0) say about a run.
struct RunShape {
  const config::Config& cfg;
  int64_t num_parameters;
  double flops_per_token;
  torch::Device device;
  int world_size;
  int64_t global_batch, total_steps, steps_per_epoch;
  double peak_flops_per_rank;
  std::string data_parallel;  // the strategy's describe()
};
void log_run_start(const RunShape& run);

// Console line (rank 0) and metrics.jsonl line of a training step.
void report_step(MetricsWriter& metrics, const StepReport& r, const SyncStats& sync);
// Console line (rank 0) and metrics.jsonl line of an evaluation after `step`, taken `train_seconds`
// into training (Counters::train_seconds) and lasting `seconds`.
void report_eval(MetricsWriter& metrics, const EvalResult& r, int64_t step, int64_t epoch, double train_seconds,
                 double seconds, const char* reason);

// Measures the FLOP/s of a square matmul in `dtype` (the precision in use: fp32, or bf16 under
// autocast) on this device with the current thread count (best of 5 runs of ~0.1 s), as the MFU
// denominator when train.peak_flops = 0. Its operands come from a private generator: the run's
// random streams are not touched.
double measure_peak_flops(const torch::Device& device, torch::ScalarType dtype);
// train.peak_flops when set, else measure_peak_flops in the precision train.autocast uses.
double resolve_peak_flops(const config::TrainConfig& train, const torch::Device& device);

}  // namespace ht::train
