// Typed configuration of a run: sections model, data, train, eval, recompute, local_sgd,
// checkpoint, log. Resolved as defaults < TOML file < --set section.key=value overrides, then
// validated as a whole. Every choice is an enum parsed here once; the rest of the code never
// compares config strings. One key table (config.cpp) drives TOML, --set, --dump-config,
// --help-config and the tables of docs/config.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/enum_names.h"
#include "core/log.h"

namespace ht::config {

enum class Task { kCausalLm, kClassification };
enum class LrScheduleKind { kCosine, kLinear, kConstant };
enum class Device { kAuto, kCpu, kCuda };
enum class Autocast { kNone, kBf16 };
// How the attention core is computed: ATen's fused scaled_dot_product_attention, or as written
// (two matmuls around a masked softmax); auto = the one measured faster for such a run (model::choose_attention).
enum class AttentionKernel { kAuto, kSdpa, kEager };
enum class NanPolicy { kStop, kSkip };
enum class EvalStrategy { kSteps, kEpoch, kNo };
enum class RecomputePolicy { kNone, kFull, kEveryK, kSelective };
enum class OptimizerState { kLocal, kAverage };
enum class OuterOptimizer { kAverage, kDiloco };
// kAuto: chosen with local_sgd.steps = auto at start (train::resolve_local_steps), never exchanged as such.
enum class ExchangeDtype { kFp32, kBf16, kFp16, kInt8, kInt4, kAuto };
enum class OptimizerKind { kAdamw, kSgd };
enum class OptimizerImpl { kAuto, kFused, kForeach, kPlain };
// A metric that evaluation logs (metrics.jsonl names), for the best checkpoint and early stopping.
enum class EvalMetric { kEvalLoss, kEvalAccuracy, kEvalF1, kEvalPerplexity };
// A boolean whose default depends on another key ("auto" in config files).
enum class AutoBool { kAuto, kFalse, kTrue };

// An inclusive range of optimizer steps ("A:B" in config files), e.g. for log.trace_steps.
// Empty (first = 0) means none.
struct StepRange {
  int64_t first = 0;
  int64_t last = 0;
  bool empty() const { return first == 0; }
  bool contains(int64_t step) const { return !empty() && step >= first && step <= last; }
};

}  // namespace ht::config

HT_ENUM_NAMES(ht::config::Task, {ht::config::Task::kCausalLm, "causal-lm"},
              {ht::config::Task::kClassification, "classification"})
HT_ENUM_NAMES(ht::config::LrScheduleKind, {ht::config::LrScheduleKind::kCosine, "cosine"},
              {ht::config::LrScheduleKind::kLinear, "linear"}, {ht::config::LrScheduleKind::kConstant, "constant"})
HT_ENUM_NAMES(ht::config::Device, {ht::config::Device::kAuto, "auto"}, {ht::config::Device::kCpu, "cpu"},
              {ht::config::Device::kCuda, "cuda"})
HT_ENUM_NAMES(ht::config::Autocast, {ht::config::Autocast::kNone, "none"}, {ht::config::Autocast::kBf16, "bf16"})
HT_ENUM_NAMES(ht::config::AttentionKernel, {ht::config::AttentionKernel::kAuto, "auto"},
              {ht::config::AttentionKernel::kSdpa, "sdpa"}, {ht::config::AttentionKernel::kEager, "eager"})
HT_ENUM_NAMES(ht::config::NanPolicy, {ht::config::NanPolicy::kStop, "stop"}, {ht::config::NanPolicy::kSkip, "skip"})
HT_ENUM_NAMES(ht::config::EvalStrategy, {ht::config::EvalStrategy::kSteps, "steps"},
              {ht::config::EvalStrategy::kEpoch, "epoch"}, {ht::config::EvalStrategy::kNo, "no"})
HT_ENUM_NAMES(ht::config::RecomputePolicy, {ht::config::RecomputePolicy::kNone, "none"},
              {ht::config::RecomputePolicy::kFull, "full"}, {ht::config::RecomputePolicy::kEveryK, "every_k"},
              {ht::config::RecomputePolicy::kSelective, "selective"})
HT_ENUM_NAMES(ht::config::OptimizerState, {ht::config::OptimizerState::kLocal, "local"},
              {ht::config::OptimizerState::kAverage, "average"})
HT_ENUM_NAMES(ht::config::OuterOptimizer, {ht::config::OuterOptimizer::kAverage, "average"},
              {ht::config::OuterOptimizer::kDiloco, "diloco"})
HT_ENUM_NAMES(ht::config::ExchangeDtype, {ht::config::ExchangeDtype::kFp32, "fp32"},
              {ht::config::ExchangeDtype::kBf16, "bf16"}, {ht::config::ExchangeDtype::kFp16, "fp16"},
              {ht::config::ExchangeDtype::kInt8, "int8"}, {ht::config::ExchangeDtype::kInt4, "int4"},
              {ht::config::ExchangeDtype::kAuto, "auto"})
HT_ENUM_NAMES(ht::config::OptimizerKind, {ht::config::OptimizerKind::kAdamw, "adamw"},
              {ht::config::OptimizerKind::kSgd, "sgd"})
HT_ENUM_NAMES(ht::config::OptimizerImpl, {ht::config::OptimizerImpl::kAuto, "auto"},
              {ht::config::OptimizerImpl::kFused, "fused"}, {ht::config::OptimizerImpl::kForeach, "foreach"},
              {ht::config::OptimizerImpl::kPlain, "plain"})
HT_ENUM_NAMES(ht::config::EvalMetric, {ht::config::EvalMetric::kEvalLoss, "eval_loss"},
              {ht::config::EvalMetric::kEvalAccuracy, "eval_accuracy"}, {ht::config::EvalMetric::kEvalF1, "eval_f1"},
              {ht::config::EvalMetric::kEvalPerplexity, "eval_perplexity"})
HT_ENUM_NAMES(ht::config::AutoBool, {ht::config::AutoBool::kAuto, "auto"}, {ht::config::AutoBool::kFalse, "false"},
              {ht::config::AutoBool::kTrue, "true"})
HT_ENUM_NAMES(ht::log::Level, {ht::log::Level::kTrace, "trace"}, {ht::log::Level::kDebug, "debug"},
              {ht::log::Level::kInfo, "info"}, {ht::log::Level::kWarn, "warn"}, {ht::log::Level::kError, "error"})

namespace ht::config {

struct ModelConfig {
  Task task = Task::kCausalLm;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t d_model = 128;
  int64_t seq_len = 128;     // context length used in training
  int64_t max_seq_len = 0;   // size of the position table; 0 = seq_len
  int64_t vocab_size = 0;    // 0 = taken from the dataset
  int64_t num_labels = 0;    // classification; 0 = taken from the dataset
  double dropout = 0.0;
  bool bias = true;
  AttentionKernel attention = AttentionKernel::kAuto;  // a run stores the kernel it resolved to
  std::string init_from;     // start weights: a Hugging Face GPT-2 directory or an hpctrain checkpoint
};

struct DataConfig {
  std::vector<std::string> paths;  // data.path: HDF5 dataset files (shards) or globs from `hpctrain prepare`
  bool shuffle = true;
  int64_t seed = 1234;
  int64_t prefetch_batches = 4;  // bounded queue depth of the background reader
};

struct TrainConfig {
  std::string output_dir = "runs/default";
  int64_t micro_batch_size = 8;   // samples per rank per micro-step
  int64_t grad_accum_steps = 1;   // micro-steps per optimizer step
  int64_t max_steps = 0;          // optimizer steps; 0 = use epochs
  int64_t epochs = 1;
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 0;
  LrScheduleKind lr_schedule = LrScheduleKind::kCosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // global-norm clip; 0 = off
  int64_t seed = 42;
  Device device = Device::kAuto;
  Autocast autocast = Autocast::kNone;
  bool autocast_emulated = false;  // allow bf16 autocast on a CPU without native bf16 (slow)
  OptimizerKind optimizer = OptimizerKind::kAdamw;
  double momentum = 0.9;          // SGD momentum
  OptimizerImpl optimizer_impl = OptimizerImpl::kAuto;
  bool shard_optimizer = false;   // ZeRO-1: each rank keeps and updates 1/W of the optimizer state
  int64_t threads = 0;            // intra-op threads per rank; 0 = cores / ranks on the node
  NanPolicy nan_policy = NanPolicy::kStop;
  double peak_flops = 0;          // FLOP/s per rank for MFU; 0 = measured at start
  bool deterministic = false;
  bool retain_freed_memory = true; // glibc keeps freed memory for reuse (core/memory.h)
  int64_t early_stopping_patience = 0;   // evaluations without improvement before stopping; 0 = off
  double early_stopping_threshold = 0.0; // an improvement must exceed this (in the metric's units)
  double target_eval_loss = 0.0;   // stop (checkpoint, exit 0) at the first evaluation at or below it; 0 = off
  int64_t sample_every_steps = 0;  // rank 0 logs a generated continuation every N steps; 0 = off
  std::string sample_prompt = "The ";
  int64_t sample_tokens = 32;      // new tokens per sample
  double sample_temperature = 0.0; // 0 = greedy
};

struct EvalConfig {
  EvalStrategy strategy = EvalStrategy::kEpoch;
  int64_t every_steps = 0;
  int64_t batch_size = 16;
  int64_t max_batches = 0;  // x batch_size = samples of a seeded random subset (all ranks together); 0 = all
};

struct RecomputeConfig {
  RecomputePolicy policy = RecomputePolicy::kNone;
  int64_t k = 1;                // every_k: recompute blocks with index % k == 0
  int64_t first_n = 0;          // every_k alternative: the first N blocks (0 = unused)
  bool attention_core = true;   // selective: also recompute the attention core (false: keep its outputs)
};

struct LocalSgdConfig {
  bool enabled = false;        // false: per-step gradient all-reduce (data parallel)
  static constexpr int64_t kAutoSteps = 0;  // steps = auto: train::resolve_local_steps() picks N at start
  static constexpr int64_t kAutoFragments = 0;  // fragments = auto: picked with N (needs steps = auto)
  static constexpr int64_t kLargestAutoSteps = 64;  // auto picks among N = 1, 2, 4, ... this
  int64_t steps = 8;           // N local steps between averages, or kAutoSteps
  int64_t warmup_steps = 0;    // synchronous steps before local steps start
  bool average_buffers = true;
  OptimizerState optimizer_state = OptimizerState::kLocal;
  OuterOptimizer outer = OuterOptimizer::kAverage;
  // Measured best at N = 8 on the demo (docs/local-sgd.md, "DiLoCo at small N"); the paper's 0.7 and
  // 0.9 are tuned for ~500 inner steps and trained worse than plain averaging at N = 8.
  double outer_lr = 1.0;
  double outer_momentum = 0.1;
  bool nesterov = true;
  ExchangeDtype comm_dtype = ExchangeDtype::kFp32;
  int64_t quant_block = 64;         // int8/int4: elements per fp32 scale
  int64_t fragments = 1;            // streaming: parameters in F fragments of whole blocks, each exchanged at its own step; or kAutoFragments
  int64_t group_size = 1;           // hierarchical: ranks per group averaging gradients every step; 0 = ranks of one node
  int64_t overlap_steps = 0;        // apply a non-blocking average k steps later; 0 = blocking
  int64_t bucket_mb = 0;            // 0 = one fused buffer (the overlapped gradient all-reduce: 1 MiB)
  bool overlap_grad_allreduce = false;  // per-step gradients: buckets start during backward (train/grad_overlap.h)
  double auto_step_penalty = 0.045;  // steps = auto: extra steps to a loss per doubling of N (fraction)
  bool consistency_check = true;
};

struct CheckpointConfig {
  std::string dir;           // default: <output_dir>/checkpoints
  int64_t every_steps = 0;   // 0 = only at the end and on signals
  int64_t keep = 2;
  bool save_final = true;
  bool allow_dataset_change = false;  // resume even if data.path now holds other data than the checkpoint's
  bool keep_best = false;             // keep the checkpoint of the best evaluation outside the rotation
  EvalMetric best_metric = EvalMetric::kEvalLoss;  // also the metric early stopping watches
  AutoBool greater_is_better = AutoBool::kAuto;    // auto: loss and perplexity lower, accuracy and F1 higher
};

struct LogConfig {
  int64_t every_steps = 10;
  log::Level level = log::Level::kInfo;
  bool all_ranks = false;
  std::string metrics_file = "metrics.jsonl";
  StepRange trace_steps;  // Chrome trace of these steps' phases, one file per rank
  bool tensorboard = false;  // also write metrics as TensorBoard events in output_dir (rank 0)
  bool plot = true;          // loss.png (gnuplot, when installed) in output_dir at the end of a run
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  EvalConfig eval;
  RecomputeConfig recompute;
  LocalSgdConfig local_sgd;
  CheckpointConfig checkpoint;
  LogConfig log;

  std::string checkpoint_dir() const;
  // checkpoint.greater_is_better resolved against checkpoint.best_metric.
  bool greater_is_better() const;
};

// Parses a TOML file (may be empty for defaults only) and applies "section.key=value" overrides.
// Throws ht::Error(kUsage) naming the key on any unknown key, wrong type or bad value, and naming
// the file when it cannot be read.
Config load(const std::string& path, const std::vector<std::string>& overrides);
// Same from TOML text (e.g. the config stored inside a checkpoint); origin names it in errors.
Config load_text(const std::string& toml_text, const std::string& origin, const std::vector<std::string>& overrides);
void apply_override(Config& cfg, const std::string& assignment);
// Checks every key's range and the cross-key constraints that do not need the dataset.
void validate(const Config& cfg);
// Why a local SGD cycle of `steps` steps does not fit local_sgd.fragments / overlap_steps: the key to
// name and the constraint; nullopt when it fits (validate() for a fixed N, the choice of steps = auto).
struct KeyProblem {
  std::string key;
  std::string why;
};
std::optional<KeyProblem> local_steps_problem(const LocalSgdConfig& l, int64_t steps);
// Resolved config as TOML text (stored in checkpoints, written to the output dir, --dump-config).
std::string to_toml(const Config& cfg);
// One line per key: name, type, default, help (`--help-config`).
std::string describe_keys();
// The same as one Markdown table per section (the tables of docs/config.md).
std::string describe_keys_markdown();

}  // namespace ht::config
