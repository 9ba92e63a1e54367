#include "train/auto_local_steps.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/exchange.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "train/data_parallel/data_parallel.h"
#include "train/data_parallel/sync.h"
#include "train/train_state.h"
#include "train/train_step.h"

namespace ht::train {

namespace {

constexpr int64_t kMinExchangesPerRun = 4;

// Waits for queued device work, so a stopwatch around it measures the work.
void wait_for(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// A batch of uniformly random tokens (and labels) of the training shape, from a private generator.
data::Batch synthetic_batch(const config::Config& cfg, const model::Gpt& gpt) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(cfg.train.seed));
  const auto opts = torch::TensorOptions().dtype(torch::kInt64);
  const int64_t B = cfg.train.micro_batch_size, T = cfg.model.seq_len;
  data::Batch b;
  b.input = torch::randint(gpt->options().vocab_size, {B, T}, gen, opts);
  if (gpt->options().num_labels == 0) {
    b.target = torch::randint(gpt->options().vocab_size, {B, T}, gen, opts);
  } else {
    b.target = torch::randint(gpt->options().num_labels, {B}, gen, opts);
    b.mask = torch::ones({B, T}, opts);
  }
  b.num_tokens = B * T;
  return b;
}

// The seconds of one step's forward and backward passes (grad_accum micro-batches), the best of
// `repeats` after one untimed pass. Gradients are dropped after each pass and the RNG streams that
// dropout draws from are restored, so training starts exactly as it would have.
double time_compute(model::Gpt& gpt, const config::Config& cfg, const torch::Device& device, int repeats) {
  auto generator = at::globalContext().defaultGenerator(device);
  const auto rng_state = generator.get_state();
  const auto batch = synthetic_batch(cfg, gpt);
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r <= repeats; ++r) {
    Stopwatch sw;
    for (int64_t m = 0; m < cfg.train.grad_accum_steps; ++m) {
      auto loss = micro_batch_loss(gpt, batch, device, cfg.train.autocast);
      (loss / static_cast<double>(cfg.train.grad_accum_steps)).backward();
    }
    wait_for(device);
    if (r > 0) best = std::min(best, sw.seconds());
    for (auto& p : gpt->parameters()) p.mutable_grad().reset();
  }
  generator.set_state(rng_state);
  return best;
}

// The best of `repeats` timed fp32 all-reduces of n values in host memory (after one untimed), the
// slowest rank's: the link's latency and rate, whatever path a device buffer would take to it.
double time_allreduce(comm::Communicator& comm, int64_t n, int repeats) {
  auto buf = torch::ones({n}, torch::kFloat);
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r <= repeats; ++r) {
    comm.barrier();
    Stopwatch sw;
    comm.allreduce(buf.data_ptr(), static_cast<size_t>(n), comm::DType::kF32, comm::ReduceOp::kSum);
    if (r > 0) best = std::min(best, sw.seconds());
  }
  return comm.allreduce_max(best);
}

// Values one exchange carries per rank: the synchronised tensors, and the optimizer moments when
// local_sgd.optimizer_state = average.
int64_t exchanged_values(model::Gpt& gpt, const config::Config& cfg) {
  int64_t n = 0;
  for (const auto& t : sync_tensors_of(*gpt, cfg.local_sgd.average_buffers)) n += t.numel();
  if (cfg.local_sgd.optimizer_state == config::OptimizerState::kAverage) {
    int64_t params = 0;
    for (const auto& p : gpt->parameters()) params += p.numel();
    n += params * (cfg.train.optimizer == config::OptimizerKind::kAdamw ? 2 : 1);
  }
  return n;
}

std::string table(const LocalStepsChoice& c) {
  std::string out = "     N    step s   steps x   s per N=1 step";
  for (const auto& k : c.candidates)
    out += fmt::format("\n  {}{:>4} {:>9.4f} {:>9.4f} {:>11.4f}", k.steps == c.steps ? "->" : "  ", k.steps, k.step_s,
                       k.relative_steps, k.cost);
  return out;
}

}  // namespace

LocalStepsChoice choose_local_steps(const config::LocalSgdConfig& l, const StepAndLink& m, int64_t total_steps) {
  LocalStepsChoice out;
  const double F = static_cast<double>(l.fragments);
  const double t_fragment = m.bytes_per_s > 0 ? m.latency_s + m.exchange_bytes / F / m.bytes_per_s : 0.0;
  const double exposed =
      l.overlap_steps > 0 ? std::max(0.0, t_fragment - static_cast<double>(l.overlap_steps) * m.compute_s) : t_fragment;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t n = 1; n <= config::LocalSgdConfig::kLargestAutoSteps; n *= 2) {
    if (config::local_steps_problem(l, n)) continue;
    if (total_steps > 0 && n > 1 && n * kMinExchangesPerRun > total_steps) continue;
    LocalStepsCandidate k;
    k.steps = n;
    k.step_s = m.compute_s + F * exposed / static_cast<double>(n);
    k.relative_steps = 1.0 + l.auto_step_penalty * std::log2(static_cast<double>(n));
    k.cost = k.step_s * k.relative_steps;
    if (k.cost < best) best = k.cost, out.steps = n;
    out.candidates.push_back(k);
  }
  HT_REQUIRE(!out.candidates.empty(), ExitCode::kUsage,
             "config key 'local_sgd.steps': auto found no N in 1..{} (powers of 2) that fits local_sgd.fragments = {} "
             "and local_sgd.overlap_steps = {}{}; set local_sgd.steps explicitly",
             config::LocalSgdConfig::kLargestAutoSteps, l.fragments, l.overlap_steps,
             total_steps > 0 ? fmt::format(" with {} exchanges in {} steps", kMinExchangesPerRun, total_steps) : "");
  return out;
}

StepAndLink measure_step_and_link(model::Gpt& gpt, comm::Communicator& comm, const config::Config& cfg,
                                  const torch::Device& device) {
  StepAndLink m;
  comm.barrier();  // every rank computes at once, as in training (ranks may share cores)
  m.compute_s = comm.allreduce_max(time_compute(gpt, cfg, device, /*repeats=*/2));
  const auto& l = cfg.local_sgd;
  m.exchange_bytes =
      static_cast<double>(comm::wire_bytes(exchange_dtype(l.comm_dtype), exchanged_values(gpt, cfg), l.quant_block));
  if (comm.size() < 2) return m;
  // Two sizes give latency and rate: 64 KiB and the exchange of one fragment, within 256 KiB..1 MiB
  // so that a 20 Mbit/s link spends about two seconds on the probe.
  const int64_t small = 16 * 1024;  // values
  const int64_t large = std::clamp<int64_t>(static_cast<int64_t>(m.exchange_bytes / l.fragments / 4), 4 * small,
                                            16 * small);
  const double t_small = time_allreduce(comm, small, 2);
  const double t_large = time_allreduce(comm, large, 1);
  const double per_byte = std::max(1e-12, (t_large - t_small) / static_cast<double>(4 * (large - small)));
  m.bytes_per_s = 1.0 / per_byte;
  m.latency_s = std::max(0.0, t_small - 4.0 * static_cast<double>(small) * per_byte);
  return m;
}

void resolve_local_steps(config::Config& cfg, model::Gpt& gpt, comm::Communicator& comm, const torch::Device& device,
                         int64_t total_steps, const std::optional<checkpoint::Snapshot>& resumed) {
  auto& l = cfg.local_sgd;
  if (!l.enabled || l.steps != config::LocalSgdConfig::kAutoSteps) return;
  if (resumed) {
    const auto stored = stored_config(*resumed);
    if (stored && stored->local_sgd.steps != config::LocalSgdConfig::kAutoSteps) {
      l.steps = stored->local_sgd.steps;
      if (comm.rank() == 0)
        HT_INFO("local_sgd.steps = auto: {} as chosen when the run started (stored in {})", l.steps, resumed->path);
      return;
    }
  }
  Stopwatch probe;
  const StepAndLink m = measure_step_and_link(gpt, comm, cfg, device);
  const LocalStepsChoice c = choose_local_steps(l, m, total_steps);
  l.steps = c.steps;
  if (comm.rank() != 0) return;
  HT_INFO("local_sgd.steps = auto: compute step {:.3f} s; link: {:.1f} MB/s, latency {:.2f} ms (fp32 all-reduce of "
          "two sizes over {} ranks; measured in {:.1f} s); an exchange carries {:.2f} MB in {}{}; assumed steps to a "
          "loss 1 + {} x log2 N",
          m.compute_s, m.bytes_per_s / 1e6, m.latency_s * 1e3, comm.size(), probe.seconds(), m.exchange_bytes / 1e6,
          config::name_of(l.comm_dtype),
          l.fragments > 1 ? fmt::format(" ({} fragments, overlap {} steps)", l.fragments, l.overlap_steps)
                          : std::string(l.overlap_steps > 0 ? fmt::format(" (overlap {} steps)", l.overlap_steps) : ""),
          l.auto_step_penalty);
  HT_INFO("local_sgd.steps = auto chose N = {} (least predicted seconds to the same loss):\n{}", c.steps, table(c));
  if (c.steps == 1 && comm.size() > 1)
    HT_INFO("local_sgd.steps = auto: N = 1 means the link keeps up with every step; the per-step gradient all-reduce "
            "(local_sgd.enabled = false, overlap_grad_allreduce = true) hides it under backward instead");
}

}  // namespace ht::train
