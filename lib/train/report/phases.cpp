#include "train/report/phases.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>

#include "comm/agree.h"
#include "core/fs.h"

#include "core/error.h"
#include "core/log.h"
#include "core/median.h"

namespace ht::train {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kComm: return "comm";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kEval: return "eval";
    case Phase::kCheckpoint: return "checkpoint";
  }
  return "?";
}

PhaseClock::Scope::Scope(PhaseClock& clock, Phase phase) : clock_(clock), phase_(phase), start_s_(clock.clock_.seconds()) {}

PhaseClock::Scope::~Scope() { clock_.record(phase_, start_s_, clock_.clock_.seconds() - start_s_); }

void PhaseClock::record(Phase phase, double start_s, double seconds) {
  totals_[static_cast<size_t>(phase)] += seconds;
  if (trace_range_.contains(step_)) events_.push_back({phase, step_, start_s, seconds});
}

void PhaseClock::enable_trace(const std::string& path, const std::string& ops_path, config::StepRange range,
                              int rank) {
  trace_range_ = range;
  trace_path_ = path;
  ops_path_ = ops_path;
  rank_ = rank;
  trace_.open(path, std::ios::trunc);
  HT_REQUIRE(trace_.good(), ExitCode::kData, "log.trace_steps: cannot write the trace file {}", path);
}

namespace {
namespace prof = torch::profiler::impl;
// CPU operators only, without shapes, stacks or memory: the least overhead per operator.
prof::ProfilerConfig op_profiler_config() { return prof::ProfilerConfig(prof::ProfilerState::KINETO); }
}  // namespace

void PhaseClock::set_step(int64_t step) {
  step_ = step;
  if (profiling_ || ops_path_.empty() || step != trace_range_.first) return;
  const std::set<prof::ActivityType> cpu{prof::ActivityType::CPU};
  torch::autograd::profiler::prepareProfiler(op_profiler_config(), cpu);
  torch::autograd::profiler::enableProfiler(op_profiler_config(), cpu);
  profiling_ = true;
}

void PhaseClock::count_step() {
  ++steps_;
  if (profiling_ && step_ >= trace_range_.last) stop_op_profile();
}

void PhaseClock::stop_op_profile() {
  if (!profiling_) return;
  profiling_ = false;
  torch::autograd::profiler::disableProfiler()->save(ops_path_);
  HT_INFO("operator profile of steps {}..{} written: {}", trace_range_.first, trace_range_.last, ops_path_);
}

PhaseSeconds PhaseClock::take(int64_t* steps) {
  const PhaseSeconds out = totals_;
  if (steps) *steps = steps_;
  totals_ = {};
  steps_ = 0;
  if (!trace_range_.empty() && step_ > trace_range_.last) finish_trace();
  return out;
}

void PhaseClock::finish_trace() {
  stop_op_profile();
  if (!trace_.is_open()) return;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  for (const Event& e : events_)
    events.push_back({{"name", phase_name(e.phase)},
                      {"cat", "step " + std::to_string(e.step)},
                      {"ph", "X"},
                      {"pid", rank_},
                      {"tid", 0},
                      {"ts", e.start_s * 1e6},
                      {"dur", e.seconds * 1e6},
                      {"args", {{"step", e.step}}}});
  trace_ << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << '\n';
  trace_.close();
  HT_INFO("trace of steps {}..{} written: {} ({} events)", trace_range_.first, trace_range_.last, trace_path_,
          events_.size());
  events_.clear();
}

PhaseStats gather_phase_stats(PhaseClock& clock, comm::Communicator& comm) {
  PhaseStats out;
  int64_t steps = 0;
  const PhaseSeconds totals = clock.take(&steps);
  for (size_t i = 0; i < totals.size(); ++i) out.mine[i] = totals[i] / static_cast<double>(std::max<int64_t>(1, steps));
  std::vector<double> all(static_cast<size_t>(comm.size() * kNumPhases));
  comm.allgather(out.mine.data(), all.data(), sizeof(double) * kNumPhases);
  for (size_t i = 0; i < static_cast<size_t>(kNumPhases); ++i) {
    std::vector<double> v;
    for (int rank = 0; rank < comm.size(); ++rank) v.push_back(all[static_cast<size_t>(rank) * kNumPhases + i]);
    out.min[i] = *std::min_element(v.begin(), v.end());
    out.max[i] = *std::max_element(v.begin(), v.end());
    out.median[i] = median(v);
  }
  return out;
}

void start_phase_trace(PhaseClock& clock, const config::Config& cfg, int64_t total_steps, comm::Communicator& comm) {
  const config::StepRange range = cfg.log.trace_steps;
  if (range.empty()) return;
  const std::string dir = cfg.train.output_dir + "/trace";
  const std::string path = fmt::format("{}/rank{}.json", dir, comm.rank());
  const std::string ops_path = fmt::format("{}/rank{}.ops.json", dir, comm.rank());
  comm::run_agreed(comm, [&] {
    HT_REQUIRE(range.last <= total_steps, ExitCode::kUsage,
               "config key 'log.trace_steps': steps {}..{} are outside the run (steps 1..{})", range.first, range.last,
               total_steps);
    fs::ensure_writable_dir(dir, "log.trace_steps directory");
    clock.enable_trace(path, ops_path, range, comm.rank());
  });
}

}  // namespace ht::train
