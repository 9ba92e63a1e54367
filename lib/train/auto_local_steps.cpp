#include "train/auto_local_steps.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "comm/exchange.h"
#include "comm/param_averager.h"
#include "core/error.h"
#include "core/log.h"
#include "core/median.h"
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

// The seconds of one step's forward and backward passes (grad_accum micro-batches) as a
// synchronising step sees them: from all ranks starting together until the slowest has finished,
// the median of `repeats` after one untimed pass. Ranks that share cores slow each other down and
// take turns being the straggler, so a best-of or per-rank time catches a rank running alone and
// predicts a step faster than training gets. Gradients are dropped after each pass and the RNG
// streams that dropout draws from are restored, so training starts exactly as it would have.
double time_compute(model::Gpt& gpt, const config::Config& cfg, comm::Communicator& comm, const torch::Device& device,
                    int repeats) {
  auto generator = at::globalContext().defaultGenerator(device);
  const auto rng_state = generator.get_state();
  const auto batch = synthetic_batch(cfg, gpt);
  std::vector<double> timed;
  for (int r = 0; r <= repeats; ++r) {
    comm.barrier();
    Stopwatch sw;
    for (int64_t m = 0; m < cfg.train.grad_accum_steps; ++m) {
      auto loss = micro_batch_loss(gpt, batch, device, cfg.train.autocast);
      (loss / static_cast<double>(cfg.train.grad_accum_steps)).backward();
    }
    wait_for(device);
    comm.barrier();
    if (r > 0) timed.push_back(sw.seconds());
    for (auto& p : gpt->parameters()) p.mutable_grad().reset();
  }
  generator.set_state(rng_state);
  return median(std::move(timed));
}

// The best of `repeats` timed means of n values through an averager exchanging in `dtype` (after one
// untimed), the slowest rank's; *bytes: what one mean hands to the exchange. The values are bound to
// the averager's buffer, as trained parameters are, so no pack or unpack copies are timed.
double time_mean(comm::Communicator& comm, comm::ExchangeDType dtype, int64_t n, int64_t quant_block, int repeats,
                 double* bytes) {
  std::vector<torch::Tensor> values{torch::ones({n}, torch::kFloat)};
  comm::AveragerOptions opts;
  opts.dtype = dtype;
  opts.quant_block = quant_block;
  opts.name = "auto probe";
  opts.announce = false;
  comm::ParamAverager averager(comm, values, opts);
  averager.bind(values);
  *bytes = static_cast<double>(averager.bytes_per_call());
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r <= repeats; ++r) {
    comm.barrier();
    Stopwatch sw;
    averager.average(values);
    if (r > 0) best = std::min(best, sw.seconds());
  }
  return comm.allreduce_max(best);
}

// Latency and rate of an exchange in `dtype`, from means of about small_bytes and large_bytes on the
// wire: whatever path a device buffer would take to the link, the exchange's own collectives.
ExchangeFit fit_exchange(comm::Communicator& comm, comm::ExchangeDType dtype, int64_t quant_block, double small_bytes,
                         double large_bytes) {
  constexpr int64_t kSample = int64_t{1} << 20;
  const double bytes_per_value = static_cast<double>(comm::wire_bytes(dtype, kSample, quant_block)) / kSample;
  double b_small = 0.0, b_large = 0.0;
  const double t_small =
      time_mean(comm, dtype, static_cast<int64_t>(small_bytes / bytes_per_value), quant_block, 2, &b_small);
  const double t_large =
      time_mean(comm, dtype, static_cast<int64_t>(large_bytes / bytes_per_value), quant_block, 1, &b_large);
  const double per_byte = std::max(1e-12, (t_large - t_small) / std::max(1.0, b_large - b_small));
  return {std::max(0.0, t_small - b_small * per_byte), 1.0 / per_byte};
}

// Values one exchange carries per rank: the synchronised tensors, and the optimizer moments when
// local_sgd.optimizer_state = average (kept apart: they go in fp32 when the tensors are quantized).
void count_exchanged_values(model::Gpt& gpt, const config::Config& cfg, StepAndLink& m) {
  m.exchange_values = 0;
  for (const auto& t : sync_tensors_of(*gpt, cfg.local_sgd.average_buffers)) m.exchange_values += t.numel();
  m.moment_values = 0;
  if (cfg.local_sgd.optimizer_state == config::OptimizerState::kAverage) {
    int64_t params = 0;
    for (const auto& p : gpt->parameters()) params += p.numel();
    m.moment_values = params * (cfg.train.optimizer == config::OptimizerKind::kAdamw ? 2 : 1);
  }
}

// One whole-model exchange on the wire in `dtype`, by the collective that carries it: a quantized
// exchange pads the tensors' values to whole blocks of one fp32 scale each and sends averaged moments
// in fp32, i.e. by all-reduce (LocalSgd::average_moments); bf16 sends both encoded, fp32 both by all-reduce.
struct WireBytes {
  double encoded = 0.0;
  double fp32 = 0.0;
  double total() const { return encoded + fp32; }
};
WireBytes exchange_bytes(const config::LocalSgdConfig& l, const StepAndLink& m, config::ExchangeDtype dtype) {
  const auto wire = exchange_dtype(dtype);
  const int64_t multiple = comm::elems_multiple(wire, l.quant_block);
  const int64_t padded = (m.exchange_values + multiple - 1) / multiple * multiple;
  const auto moments = comm::is_quantized(wire) ? comm::ExchangeDType::kF32 : wire;
  const double tensors = static_cast<double>(comm::wire_bytes(wire, padded, l.quant_block));
  const double moment = static_cast<double>(comm::wire_bytes(moments, m.moment_values, l.quant_block));
  WireBytes out;
  (wire == comm::ExchangeDType::kF32 ? out.fp32 : out.encoded) += tensors;
  (moments == comm::ExchangeDType::kF32 ? out.fp32 : out.encoded) += moment;
  return out;
}

// The per-step gradient all-reduce for `dtype`: the gradients of the exchanged tensors, no optimizer
// moments, in the dtype SyncAllReduce sends them in.
WireBytes per_step_bytes(const StepAndLink& m, config::ExchangeDtype dtype) {
  const auto wire = gradient_exchange_dtype(dtype);
  WireBytes out;
  (wire == comm::ExchangeDType::kF32 ? out.fp32 : out.encoded) +=
      static_cast<double>(comm::wire_bytes(wire, m.exchange_values, /*quant_block=*/0));
  return out;
}

// Seconds one fragment (1/F of the exchange) occupies the link: each collective its latency and rate,
// the encoded part (in `dtype`) its own timed figures, or the fp32 ones where that dtype was not timed.
double fragment_seconds(const StepAndLink& m, const WireBytes& bytes, config::ExchangeDtype dtype, double fragments) {
  if (m.bytes_per_s <= 0) return 0.0;
  const ExchangeFit fp32{m.latency_s, m.bytes_per_s};
  const auto timed = m.encoded.find(dtype);
  const ExchangeFit& encoded = timed != m.encoded.end() && timed->second.bytes_per_s > 0 ? timed->second : fp32;
  double t = 0.0;
  if (bytes.fp32 > 0) t += fp32.latency_s + bytes.fp32 / fragments / fp32.bytes_per_s;
  if (bytes.encoded > 0) t += encoded.latency_s + bytes.encoded / fragments / encoded.bytes_per_s;
  return t;
}

// The dtypes comm_dtype = auto weighs, most precise first. fp16 is left out: it carries bf16's bytes
// with less range.
std::vector<config::ExchangeDtype> dtype_candidates(const config::LocalSgdConfig& l) {
  using D = config::ExchangeDtype;
  if (l.comm_dtype != D::kAuto) return {l.comm_dtype};
  std::vector<D> out{D::kFp32, D::kBf16, D::kInt8};
  if (l.quant_block % 2 == 0) out.push_back(D::kInt4);  // int4 packs two values per byte
  return out;
}

std::vector<int64_t> fragment_candidates(const config::LocalSgdConfig& l, int64_t max_fragments) {
  if (l.fragments != config::LocalSgdConfig::kAutoFragments) return {l.fragments};
  std::vector<int64_t> out;
  for (int64_t f = 1; f <= std::max<int64_t>(1, max_fragments); f *= 2) out.push_back(f);
  return out;
}

// local_sgd.fragments as the user wrote it, for the messages.
std::string fragments_text(const config::LocalSgdConfig& l) {
  return l.fragments == config::LocalSgdConfig::kAutoFragments ? std::string("auto") : std::to_string(l.fragments);
}

// The encoded exchanges' figures for the log line, one per timed dtype.
std::string encoded_text(const StepAndLink& m) {
  std::string out;
  for (const auto& [dtype, fit] : m.encoded)
    out += fmt::format("{}{} {:.1f} MB/s / {:.2f} ms",
                       out.empty() ? "; encoded (alltoall + allgather of two sizes): " : ", ", config::name_of(dtype),
                       fit.bytes_per_s / 1e6, fit.latency_s * 1e3);
  return out;
}

bool is_auto_search(const config::LocalSgdConfig& l) {
  return l.fragments == config::LocalSgdConfig::kAutoFragments || l.comm_dtype == config::ExchangeDtype::kAuto;
}

std::string row(const LocalStepsCandidate& k, bool chosen, bool with_exchange) {
  std::string out = fmt::format("\n  {}", chosen ? "->" : "  ");
  if (with_exchange)
    out += fmt::format("{:>5} {:>2} {:>9.3f}", config::name_of(k.dtype), k.fragments, k.exchange_bytes / 1e6);
  return out + fmt::format("{:>4} {:>9.4f} {:>9.4f} {:>11.4f}", k.steps, k.step_s, k.relative_steps, k.cost);
}

// Without auto fragments or dtype: one row per N. With them: the cheapest N of every (dtype, F), then
// every N of the chosen (dtype, F).
std::string table(const LocalStepsChoice& c, bool search) {
  const std::string header = "     N    step s   steps x   s per N=1 step";
  auto chosen = [&](const LocalStepsCandidate& k) {
    return k.steps == c.steps && k.fragments == c.fragments && k.dtype == c.dtype;
  };
  auto same_exchange = [&](const LocalStepsCandidate& k) { return k.fragments == c.fragments && k.dtype == c.dtype; };
  if (!search) {
    std::string out = header;
    for (const auto& k : c.candidates) out += row(k, chosen(k), false);
    return out;
  }
  std::string out = "  dtype  F  MB/exch.   N    step s   steps x   s per N=1 step  (cheapest N of each dtype and F)";
  for (size_t i = 0; i < c.candidates.size();) {
    size_t best = i, j = i;
    for (; j < c.candidates.size() && c.candidates[j].dtype == c.candidates[i].dtype &&
           c.candidates[j].fragments == c.candidates[i].fragments;
         ++j)
      if (c.candidates[j].cost < c.candidates[best].cost) best = j;
    out += row(c.candidates[best], chosen(c.candidates[best]), true);
    i = j;
  }
  out += fmt::format("\n  every N with {} in {} fragment(s):\n{}", config::name_of(c.dtype), c.fragments, header);
  for (const auto& k : c.candidates)
    if (same_exchange(k)) out += row(k, chosen(k), false);
  return out;
}

}  // namespace

LocalStepsChoice choose_local_steps(const config::LocalSgdConfig& l, const StepAndLink& m, int64_t total_steps,
                                    int64_t max_fragments) {
  LocalStepsChoice out;
  double chosen_cost = std::numeric_limits<double>::infinity();
  for (const auto dtype : dtype_candidates(l)) {
    const WireBytes bytes = exchange_bytes(l, m, dtype);
    const WireBytes gradient_bytes = per_step_bytes(m, dtype);
    for (const int64_t fragments : fragment_candidates(l, max_fragments)) {
      config::LocalSgdConfig fixed = l;
      fixed.fragments = fragments;
      const double F = static_cast<double>(fragments);
      const double t_fragment = fragment_seconds(m, bytes, dtype, F);
      const double exposed = l.overlap_steps > 0
                                 ? std::max(0.0, t_fragment - static_cast<double>(l.overlap_steps) * m.compute_s)
                                 : t_fragment;
      std::optional<size_t> best;  // an index: the vector grows
      for (int64_t n = 1; n <= config::LocalSgdConfig::kLargestAutoSteps; n *= 2) {
        // N = 1 is the per-step gradient all-reduce (what the penalty is relative to; resolve_local_steps
        // trains it), which never quantizes gradients and averages no moments, and has no fragments or
        // overlapped merge: offered with F = 1 whatever overlap_steps asks of local SGD's cycles.
        if (n == 1 ? fragments != 1 || comm::is_quantized(exchange_dtype(dtype))
                   : config::local_steps_problem(fixed, n).has_value())
          continue;
        if (total_steps > 0 && n > 1 && n * kMinExchangesPerRun > total_steps) continue;
        LocalStepsCandidate k;
        k.steps = n;
        k.fragments = fragments;
        k.dtype = dtype;
        k.exchange_bytes = n == 1 ? gradient_bytes.total() : bytes.total();
        k.step_s = m.compute_s +
                   (n == 1 ? fragment_seconds(m, gradient_bytes, dtype, 1.0) : F * exposed / static_cast<double>(n));
        k.relative_steps = 1.0 + l.auto_step_penalty * std::log2(static_cast<double>(n));
        k.cost = k.step_s * k.relative_steps;
        out.candidates.push_back(k);
        if (!best || k.cost < out.candidates[*best].cost) best = out.candidates.size() - 1;
      }
      // The first (dtype, F) that fits is taken; a later one only when clearly cheaper.
      if (!best) continue;
      const auto& k = out.candidates[*best];
      if (std::isinf(chosen_cost) || k.cost < chosen_cost * (1.0 - kAutoMargin)) {
        chosen_cost = k.cost;
        out.steps = k.steps;
        out.fragments = k.fragments;
        out.dtype = k.dtype;
      }
    }
  }
  HT_REQUIRE(!out.candidates.empty(), ExitCode::kUsage,
             "config key 'local_sgd.steps': auto found no N in 1..{} (powers of 2) that fits local_sgd.fragments = {} "
             "and local_sgd.overlap_steps = {}{}; set local_sgd.steps explicitly",
             config::LocalSgdConfig::kLargestAutoSteps, fragments_text(l), l.overlap_steps,
             total_steps > 0 ? fmt::format(" with {} exchanges in {} steps", kMinExchangesPerRun, total_steps) : "");
  return out;
}

StepAndLink measure_step_and_link(model::Gpt& gpt, comm::Communicator& comm, const config::Config& cfg,
                                  const torch::Device& device) {
  StepAndLink m;
  // One figure on every rank (the largest), so that every rank makes the same choice.
  m.compute_s = comm.allreduce_max(time_compute(gpt, cfg, comm, device, /*repeats=*/4));
  const auto& l = cfg.local_sgd;
  count_exchanged_values(gpt, cfg, m);
  if (comm.size() < 2) return m;
  // Two sizes give latency and rate: 64 KiB and one fp32 fragment, within 256 KiB..1 MiB so that a
  // 20 Mbit/s link spends about two seconds on each timed dtype.
  const int64_t small = 16 * 1024;  // values
  const int64_t fragments = std::max<int64_t>(1, l.fragments);  // auto: sized for one fragment
  const int64_t large =
      std::clamp<int64_t>((m.exchange_values + m.moment_values) / fragments, 4 * small, 16 * small);
  const double small_bytes = 4.0 * static_cast<double>(small), large_bytes = 4.0 * static_cast<double>(large);
  const auto fp32 = fit_exchange(comm, comm::ExchangeDType::kF32, l.quant_block, small_bytes, large_bytes);
  m.latency_s = fp32.latency_s;
  m.bytes_per_s = fp32.bytes_per_s;
  // Every encoded dtype weighed has its own fit at the same wire bytes: their collectives are the same,
  // but the encode and decode work per wire byte is not (4x apart between bf16 and int4 on shared
  // memory), and on a fast link that work is the exchange's cost.
  for (const auto dtype : dtype_candidates(l))
    if (dtype != config::ExchangeDtype::kFp32)
      m.encoded[dtype] = fit_exchange(comm, exchange_dtype(dtype), l.quant_block, small_bytes, large_bytes);
  return m;
}

void resolve_local_steps(config::Config& cfg, model::Gpt& gpt, comm::Communicator& comm, const torch::Device& device,
                         int64_t total_steps, const std::optional<checkpoint::Snapshot>& resumed) {
  auto& l = cfg.local_sgd;
  if (!l.enabled || l.steps != config::LocalSgdConfig::kAutoSteps) return;
  const bool search = is_auto_search(l);
  if (resumed) {
    const auto stored = stored_config(*resumed);
    if (stored && stored->local_sgd.steps != config::LocalSgdConfig::kAutoSteps) {
      const auto& s = stored->local_sgd;
      l.steps = s.steps;
      if (l.fragments == config::LocalSgdConfig::kAutoFragments) l.fragments = s.fragments;
      if (l.comm_dtype == config::ExchangeDtype::kAuto) l.comm_dtype = s.comm_dtype;
      if (!s.enabled) {  // N = 1 was chosen: the run trains (and its checkpoint holds) the per-step mode
        l.enabled = false;
        l.fragments = s.fragments;
        l.comm_dtype = s.comm_dtype;
        l.overlap_steps = s.overlap_steps;
      }
      if (comm.rank() == 0)
        HT_INFO("local_sgd.steps = auto: {}{}{} as chosen when the run started (stored in {})", l.steps,
                search ? fmt::format(", {} fragment(s), {} exchange", l.fragments, config::name_of(l.comm_dtype)) : "",
                l.enabled ? "" : " (the per-step gradient all-reduce)", resumed->path);
      return;
    }
  }
  Stopwatch probe;
  const StepAndLink m = measure_step_and_link(gpt, comm, cfg, device);
  const LocalStepsChoice c = choose_local_steps(l, m, total_steps, gpt->options().n_layer);
  const std::string asked =
      fmt::format("fragments {}, comm_dtype {}{}", fragments_text(l), config::name_of(l.comm_dtype),
                  l.overlap_steps > 0 ? fmt::format(", overlap {} steps", l.overlap_steps) : "");
  l.steps = c.steps;
  l.fragments = c.fragments;
  l.comm_dtype = c.dtype;
  // The model's N = 1 is per-step gradient averaging (its steps are what the penalty is relative to);
  // local SGD with N = 1 would average parameters after every step with per-rank optimizer moments,
  // which needed 72 steps where per-step averaging needed 64 (docs/local-sgd.md).
  const bool per_step = c.steps == 1 && comm.size() > 1;
  if (per_step) {
    l.enabled = false;
    l.overlap_steps = 0;  // local SGD's merge delay: the per-step mode has none (and N = 1 allows none)
  }
  if (comm.rank() != 0) return;
  HT_INFO("local_sgd.steps = auto: compute step {:.3f} s; link: {:.1f} MB/s, latency {:.2f} ms (fp32 all-reduce of "
          "two sizes over {} ranks){}; measured in {:.1f} s; an exchange carries {} values{} ({}); assumed steps to a "
          "loss 1 + {} x log2 N{}",
          m.compute_s, m.bytes_per_s / 1e6, m.latency_s * 1e3, comm.size(),
          encoded_text(m),
          probe.seconds(), m.exchange_values,
          m.moment_values > 0 ? fmt::format(" and {} optimizer moments", m.moment_values) : "", asked,
          l.auto_step_penalty,
          search ? fmt::format("; the same steps for every dtype and F; a coarser dtype or more fragments only when "
                               ">= {:.0f} % faster",
                               kAutoMargin * 100)
                 : "");
  HT_INFO("local_sgd.steps = auto chose N = {}{} (least predicted seconds to the same loss):\n{}", c.steps,
          search ? fmt::format(" with {} fragment(s) and {} exchange", c.fragments, config::name_of(c.dtype)) : "",
          table(c, search));
  if (per_step)
    HT_INFO("local_sgd.steps = auto: N = 1 means the link keeps up with every step: training with the per-step "
            "gradient all-reduce (local_sgd.enabled = false{}){}",
            l.comm_dtype == config::ExchangeDtype::kFp32 ? "" : fmt::format(", {}", config::name_of(l.comm_dtype)),
            l.overlap_grad_allreduce ? ", overlapped with backward"
                                     : "; local_sgd.overlap_grad_allreduce = true would hide it under backward");
}

}  // namespace ht::train
