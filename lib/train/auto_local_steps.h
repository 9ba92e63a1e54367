// local_sgd.steps = auto: measure one training step's compute and the link at start-up, predict from
// the cost model of jobs/bench/cost_model.py how long each candidate N takes to reach a given loss,
// take the fastest, and say why.
//
//   step(N)   = t_compute + F x exposed / N              exposed = t_fragment, less tau x t_compute when
//                                                        each exchange overlaps tau steps (overlap_steps)
//   t_fragment = latency + (exchange bytes / F) / rate    fitted on two timed all-reduces
//   steps(N)  = steps(1) x (1 + penalty x log2 N)         penalty = local_sgd.auto_step_penalty
//   choose the N that minimises steps(N) x step(N)
//
// The step penalty is not measured here: it is what the demo needed (docs/local-sgd.md). A run that
// resumes keeps its checkpoint's N, so the cycle and the stored exchange state stay valid.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "model/gpt.h"

namespace ht::train {

struct StepAndLink {
  double compute_s = 0.0;        // one optimizer step without communication (the slowest rank)
  double latency_s = 0.0;        // all-reduce time = latency_s + bytes / bytes_per_s
  double bytes_per_s = 0.0;      // 0: no link (one rank)
  double exchange_bytes = 0.0;   // one whole-model exchange in local_sgd.comm_dtype, bytes per rank
};

struct LocalStepsCandidate {
  int64_t steps = 1;
  double step_s = 0.0;           // predicted mean step time
  double relative_steps = 1.0;   // predicted steps to a loss, relative to N = 1
  double cost = 0.0;             // step_s x relative_steps: seconds per step of N = 1's progress
};

struct LocalStepsChoice {
  int64_t steps = 1;
  std::vector<LocalStepsCandidate> candidates;  // the N that fit fragments and overlap_steps, ascending
};

// The candidates N = 1, 2, 4, ... 64 that fit local_sgd.fragments and overlap_steps and leave at
// least 4 exchanges in a run of total_steps (0: unknown), each predicted; the cheapest wins (the
// smaller N on a tie). Throws kUsage naming local_sgd.steps when no candidate fits.
LocalStepsChoice choose_local_steps(const config::LocalSgdConfig& l, const StepAndLink& m, int64_t total_steps);

// Collective. Times grad_accum forward/backward passes of synthetic batches (the parameters, the
// gradients and the RNG streams are left as they were) and fp32 all-reduces of two sizes, the
// slowest rank's figures on every rank.
StepAndLink measure_step_and_link(model::Gpt& gpt, comm::Communicator& comm, const config::Config& cfg,
                                  const torch::Device& device);

// Collective when cfg.local_sgd.steps is auto and local SGD is on: sets it to the checkpoint's N when
// `resumed` holds one, else measures and chooses, and logs the table and the choice on rank 0.
// Leaves any other config unchanged.
void resolve_local_steps(config::Config& cfg, model::Gpt& gpt, comm::Communicator& comm, const torch::Device& device,
                         int64_t total_steps, const std::optional<checkpoint::Snapshot>& resumed);

}  // namespace ht::train
