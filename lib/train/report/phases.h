// Where a training step's time goes: wall time per phase (data wait, forward, backward,
// communication, optimizer, evaluation, checkpoint), summed over a logging interval, and a Chrome
// trace (trace-event JSON, viewable in Perfetto or chrome://tracing) of the steps log.trace_steps names,
// with an operator-level trace of the same steps from torch's profiler (the one torch.profiler
// drives in Python, so jobs/bench/op_profile.py can set the two side by side).
#pragma once
#include <array>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "core/timer.h"

namespace ht::train {

enum class Phase { kData, kForward, kBackward, kComm, kOptimizer, kEval, kCheckpoint };
inline constexpr int kNumPhases = 7;
const char* phase_name(Phase p);

using PhaseSeconds = std::array<double, kNumPhases>;

class PhaseClock {
 public:
  // Times one phase from construction to destruction.
  class Scope {
   public:
    Scope(PhaseClock& clock, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseClock& clock_;
    Phase phase_;
    double start_s_;
  };
  // Runs fn timed as `phase` (a Scope around one call).
  template <typename Fn>
  void time(Phase phase, Fn&& fn) {
    Scope scope(*this, phase);
    fn();
  }

  // Steps in `range` are traced into `path` (opened now: an unwritable path is an error before
  // training starts, naming it), their operators into `ops_path`. pid in the trace = rank.
  void enable_trace(const std::string& path, const std::string& ops_path, config::StepRange range, int rank);
  // The optimizer step now running (1-based), for the trace; the operator profile starts with the
  // first traced step.
  void set_step(int64_t step);
  // Seconds per phase since the last take(), and the number of steps they cover; resets both.
  PhaseSeconds take(int64_t* steps);
  // The step is done; the operator profile ends with the last traced step.
  void count_step();
  // Writes the trace file (once the traced range has passed, or at the end of the run).
  void finish_trace();

 private:
  struct Event {
    Phase phase;
    int64_t step;
    double start_s, seconds;
  };
  void record(Phase phase, double start_s, double seconds);

  Stopwatch clock_;
  PhaseSeconds totals_{};
  int64_t steps_ = 0;
  int64_t step_ = 0;
  config::StepRange trace_range_;
  std::string trace_path_;
  std::ofstream trace_;
  std::vector<Event> events_;
  int rank_ = 0;
  std::string ops_path_;
  bool profiling_ = false;
  void stop_op_profile();
};

// Mean seconds per step of each phase over a logging interval: this rank's, and the minimum,
// median and maximum over ranks (a straggler shows as a wide max).
struct PhaseStats {
  PhaseSeconds mine{}, min{}, median{}, max{};
};

// Collective (every rank logs at the same steps): takes the clock's interval and gathers it.
PhaseStats gather_phase_stats(PhaseClock& clock, comm::Communicator& comm);

// Collective: when log.trace_steps names steps, checks they lie within the run's `total_steps`
// and opens each rank's trace file (OUTPUT_DIR/trace/rankR.json); any rank's failure ends the job once.
void start_phase_trace(PhaseClock& clock, const config::Config& cfg, int64_t total_steps, comm::Communicator& comm);

}  // namespace ht::train
