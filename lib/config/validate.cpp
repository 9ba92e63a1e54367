// validate(): the range of every key and the cross-key constraints that need no dataset, including
// a memory bound: a model whose parameters and optimizer state cannot fit this machine is refused
// here, naming the keys, instead of failing deep inside the allocator.
#include <unistd.h>

#include <cmath>
#include <utility>

#include "config/config.h"
#include "core/error.h"

namespace ht::config {
namespace {

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  HT_FAIL(ExitCode::kUsage, "config key '{}': {}", name, why);
}

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

// fp32 parameters, gradients and the two AdamW moments: 16 bytes per parameter. Computed in
// double so that absurd sizes cannot overflow before they are compared.
void check_fits_in_memory(const Config& c) {
  const double mem = physical_memory_bytes();
  if (mem <= 0) return;
  const double d = static_cast<double>(c.model.d_model), L = static_cast<double>(c.model.n_layer);
  const double positions = static_cast<double>(c.model.max_seq_len > 0 ? c.model.max_seq_len : c.model.seq_len);
  const double embeddings = (static_cast<double>(c.model.vocab_size) + positions) * d;
  const double blocks = L * (12.0 * d * d + 13.0 * d);
  const double state_bytes = 16.0 * (embeddings + blocks);
  // The least a micro-step must hold even with every block recomputed: one block input per block,
  // the logits and their gradient. A lower bound, so nothing that could run is refused.
  const double tokens = static_cast<double>(c.train.micro_batch_size) * static_cast<double>(c.model.seq_len);
  const double act_bytes = tokens * (L * d * 4.0 + 8.0 * static_cast<double>(c.model.vocab_size));
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (state_bytes > mem) {
    const char* key = embeddings > blocks ? (c.model.vocab_size * d > positions * d ? "model.vocab_size"
                                                                                      : "model.max_seq_len")
                                          : (d * d > L ? "model.d_model" : "model.n_layer");
    bad(key, fmt::format("the model would need {:.1f} GiB for parameters, gradients and AdamW state "
                         "(model.d_model = {}, model.n_layer = {}, model.vocab_size = {}, position table {}), "
                         "more than this machine's {:.1f} GiB of memory",
                         state_bytes / gib, c.model.d_model, c.model.n_layer, c.model.vocab_size,
                         static_cast<int64_t>(positions), mem / gib));
  }
  if (act_bytes > mem)
    bad("train.micro_batch_size",
        fmt::format("{} samples of model.seq_len = {} would need at least {:.1f} GiB of activations per micro-step, "
                    "more "
                    "than this machine's {:.1f} GiB of memory",
                    c.train.micro_batch_size, c.model.seq_len, act_bytes / gib, mem / gib));
}

// The best checkpoint and early stopping watch a metric that evaluation must log.
void check_evaluation_use(const Config& c) {
  if (c.train.early_stopping_patience < 0) bad("train.early_stopping_patience", "must be >= 0 (0 = off)");
  if (!(c.train.early_stopping_threshold >= 0)) bad("train.early_stopping_threshold", "must be >= 0");
  if (!(c.train.target_eval_loss >= 0 && std::isfinite(c.train.target_eval_loss)))
    bad("train.target_eval_loss", "must be >= 0 (0 = off)");
  if (c.train.target_eval_loss > 0 && c.eval.strategy == EvalStrategy::kNo)
    bad("train.target_eval_loss", "needs evaluations, but eval.strategy = no; set eval.strategy = steps or epoch");
  const bool uses_metric = c.checkpoint.keep_best || c.train.early_stopping_patience > 0;
  if (!uses_metric) return;
  const char* user = c.checkpoint.keep_best ? "checkpoint.keep_best" : "train.early_stopping_patience";
  if (c.eval.strategy == EvalStrategy::kNo)
    bad(user, "needs evaluations, but eval.strategy = no; set eval.strategy = steps or epoch");
  const EvalMetric m = c.checkpoint.best_metric;
  if (m == EvalMetric::kEvalF1 && c.model.task != Task::kClassification)
    bad("checkpoint.best_metric", fmt::format("eval_f1 is never logged for model.task = {} (classification only); "
                                              "use eval_loss, eval_accuracy or eval_perplexity",
                                              name_of(c.model.task)));
  if (m == EvalMetric::kEvalPerplexity && c.model.task != Task::kCausalLm)
    bad("checkpoint.best_metric", "eval_perplexity is logged for model.task = causal-lm only; use eval_loss, "
                                  "eval_accuracy or eval_f1");
}

// The data-parallel keys that need no world size (those that do: train::check_world).
void check_data_parallel(const Config& c) {
  const LocalSgdConfig& l = c.local_sgd;
  if (c.train.shard_optimizer && l.enabled && l.group_size == 1)
    bad("train.shard_optimizer", "shards the optimizer state of the per-step data-parallel mode, or with "
                                 "local_sgd.enabled = true inside the groups of the hierarchical mode "
                                 "(local_sgd.group_size = 0 or >= 2); with local_sgd.group_size = 1 every rank is "
                                 "a replica of its own and keeps its whole optimizer state");
  if (l.quant_block < 2 || l.quant_block > 65536) bad("local_sgd.quant_block", "must be in [2, 65536]");
  if (l.comm_dtype == ExchangeDtype::kInt4 && l.quant_block % 2 != 0)
    bad("local_sgd.quant_block", fmt::format("{} is odd, but local_sgd.comm_dtype = int4 packs two values per byte: "
                                             "the block must be even", l.quant_block));
  const bool auto_fragments = l.fragments == LocalSgdConfig::kAutoFragments;
  if (l.fragments < 1 && !auto_fragments) bad("local_sgd.fragments", "must be >= 1");
  if (l.fragments > c.model.n_layer)
    bad("local_sgd.fragments", fmt::format("{} fragments of whole blocks need at least as many blocks, but "
                                           "model.n_layer = {}", l.fragments, c.model.n_layer));
  if (!(l.auto_step_penalty >= 0 && l.auto_step_penalty <= 1)) bad("local_sgd.auto_step_penalty", "must be in [0, 1]");
  // fragments and comm_dtype = auto are chosen together with N, by the same measurement.
  const bool auto_dtype = l.comm_dtype == ExchangeDtype::kAuto;
  using Flag = std::pair<const char*, bool>;
  for (const auto& [key, is_auto] :
       {Flag{"local_sgd.fragments", auto_fragments}, Flag{"local_sgd.comm_dtype", auto_dtype}}) {
    if (!is_auto) continue;
    if (!l.enabled || l.steps != LocalSgdConfig::kAutoSteps)
      bad(key, "auto is chosen together with N: it needs local_sgd.enabled = true and local_sgd.steps = auto");
  }
  if (auto_fragments && l.optimizer_state == OptimizerState::kAverage)
    bad("local_sgd.fragments", "auto may choose several fragments, but local_sgd.optimizer_state = average needs "
                               "local_sgd.fragments = 1");
  if (l.steps == LocalSgdConfig::kAutoSteps) {
    // The choice takes only N that pass the checks below; the groups' per-step exchange is outside its model.
    if (l.enabled && l.group_size != 1)
      bad("local_sgd.steps", "auto chooses N for flat local SGD; with hierarchical groups (local_sgd.group_size "
                             "!= 1) set N explicitly");
    // With fragments = auto, F = 1 is always a candidate: it fits whenever any F does.
    LocalSgdConfig fixed = l;
    if (auto_fragments) fixed.fragments = 1;
    bool any_fits = false;
    for (int64_t n = 1; n <= LocalSgdConfig::kLargestAutoSteps; n *= 2)
      any_fits = any_fits || !local_steps_problem(fixed, n);
    if (!any_fits)
      bad("local_sgd.steps", fmt::format("auto: no N in 1, 2, 4, ... {} fits local_sgd.fragments = {} and "
                                         "local_sgd.overlap_steps = {}; set N explicitly",
                                         LocalSgdConfig::kLargestAutoSteps, fixed.fragments, l.overlap_steps));
  } else if (const auto problem = local_steps_problem(l, l.steps)) {
    bad(problem->key, problem->why);
  }
  if (l.group_size < 0) bad("local_sgd.group_size", "must be >= 0 (0 = the ranks of one node, 1 = flat)");
}

// A key documented as a file name inside train.output_dir: with a '/' (an absolute path, a '..' or a
// subdirectory) the file would land elsewhere, outside the directory the run owns and locks.
void check_name_inside_output_dir(const std::string& key, const std::string& name) {
  if (name.empty()) bad(key, "must not be empty");
  if (name.find('/') != std::string::npos || name == "." || name == "..")
    bad(key, fmt::format("'{}' is not a file name: it names a file inside train.output_dir, so it may not contain "
                         "'/' (no directories, no '..', not an absolute path)",
                         name));
}

}  // namespace

std::optional<KeyProblem> local_steps_problem(const LocalSgdConfig& l, int64_t steps) {
  if (steps % l.fragments != 0)
    return KeyProblem{"local_sgd.fragments", fmt::format("{} fragments do not divide local_sgd.steps = {}: each "
                                                         "fragment needs its own step of the cycle", l.fragments, steps)};
  if (l.fragments > 1 && l.overlap_steps > 0 && l.overlap_steps >= steps / l.fragments)
    return KeyProblem{"local_sgd.overlap_steps",
                      fmt::format("{} must be smaller than local_sgd.steps / local_sgd.fragments = {} (a fragment's "
                                  "exchange must land before the next one starts)", l.overlap_steps, steps / l.fragments)};
  if (l.overlap_steps > 0 && l.overlap_steps >= steps)
    return KeyProblem{"local_sgd.overlap_steps", fmt::format("{} must be smaller than local_sgd.steps = {}",
                                                             l.overlap_steps, steps)};
  return std::nullopt;
}

void validate(const Config& c) {
  if (c.model.n_layer < 1) bad("model.n_layer", "must be >= 1");
  if (c.model.n_head < 1) bad("model.n_head", "must be >= 1");
  if (c.model.d_model < 1) bad("model.d_model", "must be >= 1");
  if (c.model.d_model % c.model.n_head != 0)
    bad("model.n_head", fmt::format("{} heads do not divide model.d_model = {}", c.model.n_head, c.model.d_model));
  if (c.model.seq_len < 1) bad("model.seq_len", "must be >= 1");
  if (c.model.max_seq_len < 0) bad("model.max_seq_len", "must be >= 0");
  if (c.model.max_seq_len != 0 && c.model.seq_len > c.model.max_seq_len)
    bad("model.seq_len", fmt::format("{} exceeds model.max_seq_len = {}", c.model.seq_len, c.model.max_seq_len));
  if (c.model.vocab_size < 0) bad("model.vocab_size", "must be >= 0");
  if (c.model.vocab_size > (int64_t{1} << 32))
    bad("model.vocab_size", "must be at most 2^32 (token ids are stored as uint32)");
  if (c.model.num_labels < 0) bad("model.num_labels", "must be >= 0");
  if (!(c.model.dropout >= 0.0 && c.model.dropout < 1.0)) bad("model.dropout", "must be in [0, 1)");
  if (c.data.prefetch_batches < 1) bad("data.prefetch_batches", "must be >= 1");
  if (c.train.output_dir.empty()) bad("train.output_dir", "must not be empty");
  if (c.train.micro_batch_size < 1) bad("train.micro_batch_size", "must be >= 1");
  if (c.train.grad_accum_steps < 1) bad("train.grad_accum_steps", "must be >= 1");
  if (c.train.max_steps < 0) bad("train.max_steps", "must be >= 0");
  if (c.train.max_steps == 0 && c.train.epochs < 1) bad("train.epochs", "must be >= 1 when train.max_steps = 0");
  if (!(c.train.lr > 0 && std::isfinite(c.train.lr))) bad("train.lr", "must be a positive number");
  if (c.train.min_lr < 0 || c.train.min_lr > c.train.lr) bad("train.min_lr", "must be in [0, train.lr]");
  if (c.train.warmup_steps < 0) bad("train.warmup_steps", "must be >= 0");
  if (!(c.train.weight_decay >= 0)) bad("train.weight_decay", "must be >= 0");
  if (!(c.train.beta1 >= 0 && c.train.beta1 < 1)) bad("train.beta1", "must be in [0, 1)");
  if (!(c.train.beta2 >= 0 && c.train.beta2 < 1)) bad("train.beta2", "must be in [0, 1)");
  if (!(c.train.eps > 0)) bad("train.eps", "must be > 0");
  if (!(c.train.momentum >= 0 && c.train.momentum < 1)) bad("train.momentum", "must be in [0, 1)");
  if (!(c.train.grad_clip >= 0)) bad("train.grad_clip", "must be >= 0");
  if (c.train.threads < 0) bad("train.threads", "must be >= 0");
  if (!(c.train.peak_flops >= 0)) bad("train.peak_flops", "must be >= 0");
  if (c.train.sample_every_steps < 0) bad("train.sample_every_steps", "must be >= 0 (0 = off)");
  if (c.train.sample_tokens < 1) bad("train.sample_tokens", "must be >= 1");
  if (!(c.train.sample_temperature >= 0 && std::isfinite(c.train.sample_temperature)))
    bad("train.sample_temperature", "must be >= 0 (0 = greedy)");
  if (c.eval.strategy == EvalStrategy::kSteps && c.eval.every_steps < 1)
    bad("eval.every_steps", "must be >= 1 when eval.strategy = steps");
  if (c.eval.every_steps < 0) bad("eval.every_steps", "must be >= 0");
  if (c.eval.batch_size < 1) bad("eval.batch_size", "must be >= 1");
  if (c.eval.max_batches < 0) bad("eval.max_batches", "must be >= 0");
  if (c.recompute.policy == RecomputePolicy::kEveryK) {
    if (c.recompute.first_n < 0 || c.recompute.first_n > c.model.n_layer)
      bad("recompute.first_n", fmt::format("must be in [0, model.n_layer = {}]", c.model.n_layer));
    if (c.recompute.first_n == 0 && (c.recompute.k < 1 || c.recompute.k > c.model.n_layer))
      bad("recompute.k", fmt::format("must be in [1, model.n_layer = {}]", c.model.n_layer));
  }
  if (c.local_sgd.steps < 1 && c.local_sgd.steps != LocalSgdConfig::kAutoSteps)
    bad("local_sgd.steps", "must be >= 1 or \"auto\"");
  if (c.local_sgd.warmup_steps < 0) bad("local_sgd.warmup_steps", "must be >= 0");
  if (c.local_sgd.enabled && c.train.max_steps > 0 && c.local_sgd.warmup_steps >= c.train.max_steps)
    bad("local_sgd.warmup_steps",
        fmt::format("{} is not shorter than train.max_steps = {}", c.local_sgd.warmup_steps, c.train.max_steps));
  if (!(c.local_sgd.outer_lr > 0)) bad("local_sgd.outer_lr", "must be > 0");
  if (!(c.local_sgd.outer_momentum >= 0 && c.local_sgd.outer_momentum < 1))
    bad("local_sgd.outer_momentum", "must be in [0, 1)");
  if (c.local_sgd.overlap_steps < 0) bad("local_sgd.overlap_steps", "must be >= 0");
  if (c.local_sgd.bucket_mb < 0) bad("local_sgd.bucket_mb", "must be >= 0");
  check_data_parallel(c);
  if (c.checkpoint.every_steps < 0) bad("checkpoint.every_steps", "must be >= 0");
  if (c.checkpoint.keep < 2) bad("checkpoint.keep", "must be >= 2 so a damaged newest file has a fallback");
  if (c.log.every_steps < 1) bad("log.every_steps", "must be >= 1");
  check_name_inside_output_dir("log.metrics_file", c.log.metrics_file);
  check_evaluation_use(c);
  check_fits_in_memory(c);
}

}  // namespace ht::config
