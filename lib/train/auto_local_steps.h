// local_sgd.steps = auto: measure one training step's compute and the link at start-up, predict from
// the cost model of jobs/bench/cost_model.py how long each candidate takes to reach a given loss,
// take the fastest, and say why. A candidate is N, and also the fragment count F and the exchange
// dtype where local_sgd.fragments / comm_dtype are auto too.
//
//   step(N)   = t_compute + F x exposed / N              exposed = t_fragment, less tau x t_compute when
//                                                        each exchange overlaps tau steps (overlap_steps)
//   t_fragment = latency + (exchange bytes / F) / rate    fitted on timed exchanges of two sizes; the
//                                                        bytes are the dtype's wire bytes (codes and scales)
//   fp32 goes by one all-reduce, an encoded dtype by an alltoall of the encoded chunks and an allgather
//   of the mean (comm/param_averager.h): each dtype weighed (fixed or auto) has its own latency and
//   rate, timed at start-up through the averager training uses (its encode and decode work per wire
//   byte differs: on shared memory bf16 moved ~550 MB/s of wire bytes, int8 ~210, int4 ~45)
//   steps(N)  = steps(1) x (1 + penalty x log2 N)         penalty = local_sgd.auto_step_penalty
//   choose the candidate that minimises steps(N) x step(N)
//
// N = 1 is per-step gradient averaging, the mode steps(1) and the penalty's fit are measured with: its
// exchange is the gradients' all-reduce (fp32 or 16-bit, never quantized, no moments), charged
// blocking, and when it wins the run trains it (local_sgd.enabled = false), not local SGD with N = 1.
//
// Neither the step penalty nor the quality of a quantized exchange can be measured at start-up (that
// takes the training run itself): the default penalty is the fit of jobs/bench/steps_to_loss.py on the
// demo (docs/local-sgd.md), where int4 deltas and streaming also needed the steps of plain averaging at
// the same N, so the model charges a dtype its bytes only. That is why a coarser dtype, or more
// fragments, replaces a choice only when it is predicted at least kAutoMargin faster. A run that
// resumes keeps its checkpoint's choice, so the cycle and the stored exchange state stay valid.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "model/gpt.h"

namespace ht::train {

// Exchange time = latency_s + wire bytes / bytes_per_s.
struct ExchangeFit {
  double latency_s = 0.0;
  double bytes_per_s = 0.0;
};

struct StepAndLink {
  double compute_s = 0.0;        // one step's forward + backward, all ranks together until the slowest ends
  double latency_s = 0.0;        // fp32 exchange (all-reduce) time = latency_s + bytes / bytes_per_s
  double bytes_per_s = 0.0;      // 0: no link (one rank)
  // The same for each encoded dtype timed (bf16, fp16, int8, int4: alltoall + allgather); a dtype
  // without an entry is charged the fp32 figures.
  std::map<config::ExchangeDtype, ExchangeFit> encoded;
  int64_t exchange_values = 0;   // values of the synchronised tensors one exchange carries per rank
  int64_t moment_values = 0;     // and of the optimizer moments (local_sgd.optimizer_state = average)
};

struct LocalStepsCandidate {
  int64_t steps = 1;
  int64_t fragments = 1;
  config::ExchangeDtype dtype = config::ExchangeDtype::kFp32;
  double exchange_bytes = 0.0;   // one whole-model exchange on the wire in this dtype, bytes per rank
  double step_s = 0.0;           // predicted mean step time
  double relative_steps = 1.0;   // predicted steps to a loss, relative to N = 1
  double cost = 0.0;             // step_s x relative_steps: seconds per step of N = 1's progress
};

struct LocalStepsChoice {
  int64_t steps = 1;
  int64_t fragments = 1;
  config::ExchangeDtype dtype = config::ExchangeDtype::kFp32;
  // Every candidate predicted, grouped by dtype (fp32, bf16, int8, int4) then F, N ascending.
  std::vector<LocalStepsCandidate> candidates;
};

// A coarser dtype or more fragments must be predicted this much faster to replace a choice.
inline constexpr double kAutoMargin = 0.02;

// The candidates N = 1, 2, 4, ... 64 that fit the fragments and overlap_steps and leave at least 4
// exchanges in a run of total_steps (0: unknown), and N = 1 (the per-step mode: no fragments, no
// overlapped merge) with F = 1 whatever overlap_steps says; with fragments = auto also F = 1, 2, 4, ... up to
// max_fragments (the model's blocks), with comm_dtype = auto the dtypes fp32, bf16, int8 and int4 (int4
// only with an even quant_block). For each (dtype, F) the cheapest N wins (the smaller on a tie); the
// (dtype, F) are then visited from the most precise and fewest fragments on, each taking over only when
// kAutoMargin cheaper. Throws kUsage naming local_sgd.steps when no candidate fits.
LocalStepsChoice choose_local_steps(const config::LocalSgdConfig& l, const StepAndLink& m, int64_t total_steps,
                                    int64_t max_fragments = 1);

// Collective. Times grad_accum forward/backward passes of synthetic batches (the parameters, the
// gradients and the RNG streams are left as they were), fp32 exchanges of two sizes and, where
// local_sgd.comm_dtype is encoded or auto, exchanges of two sizes in each encoded dtype weighed; the
// slowest rank's figures on every rank.
StepAndLink measure_step_and_link(model::Gpt& gpt, comm::Communicator& comm, const config::Config& cfg,
                                  const torch::Device& device);

// Collective when cfg.local_sgd.steps is auto and local SGD is on: sets it (and fragments / comm_dtype
// where those are auto) to the checkpoint's when `resumed` holds them, else measures and chooses, and
// logs the table and the choice on rank 0. N = 1 on more than one rank also sets local_sgd.enabled =
// false (the per-step mode) and overlap_steps = 0, as does a checkpoint of such a run. Leaves any
// other config unchanged.
void resolve_local_steps(config::Config& cfg, model::Gpt& gpt, comm::Communicator& comm, const torch::Device& device,
                         int64_t total_steps, const std::optional<checkpoint::Snapshot>& resumed);

}  // namespace ht::train
