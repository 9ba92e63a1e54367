// Typed configuration of a run: sections model, data, train, eval, recompute, local_sgd,
// checkpoint, log. Resolved as defaults < TOML file < --set section.key=value overrides,
// then validated as a whole. Every key is documented in docs/config.md and by `--help-config`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ht::config {

struct ModelConfig {
  std::string task = "causal-lm";  // causal-lm | classification
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t d_model = 128;
  int64_t seq_len = 128;     // context length used in training
  int64_t max_seq_len = 0;   // size of the position table; 0 = seq_len
  int64_t vocab_size = 0;    // 0 = taken from the dataset
  int64_t num_labels = 0;    // classification; 0 = taken from the dataset
  double dropout = 0.0;
  bool bias = true;
};

struct DataConfig {
  std::string path;          // HDF5 dataset file written by `hpctrain prepare`
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
  std::string lr_schedule = "cosine";  // cosine | linear | constant
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // global-norm clip; 0 = off
  int64_t seed = 42;
  std::string device = "auto";    // auto | cpu | cuda
  std::string autocast = "none";  // none | bf16 (CUDA only)
  int64_t threads = 0;            // intra-op threads per rank; 0 = cores / ranks on the node
  std::string nan_policy = "stop";  // stop | skip
  double peak_flops = 0;            // FLOP/s per rank for MFU; 0 = measured at start
  bool deterministic = false;
};

struct EvalConfig {
  std::string strategy = "epoch";  // steps | epoch | no
  int64_t every_steps = 0;
  int64_t batch_size = 16;
  int64_t max_batches = 0;  // per rank; 0 = whole validation set
};

struct RecomputeConfig {
  std::string policy = "none";  // none | full | every_k | selective
  int64_t k = 1;                // every_k: recompute blocks with index % k == 0
  int64_t first_n = 0;          // every_k alternative: the first N blocks (0 = unused)
  bool attention_core = true;   // selective: also recompute the attention core (false: keep its outputs)
};

struct LocalSgdConfig {
  bool enabled = false;        // false: per-step gradient all-reduce (data parallel)
  int64_t steps = 8;           // N local steps between averages
  int64_t warmup_steps = 0;    // synchronous steps before local steps start
  bool average_buffers = true;
  std::string optimizer_state = "local";  // local | average
  std::string outer = "average";          // average | diloco
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool nesterov = true;
  std::string comm_dtype = "fp32";  // fp32 | bf16 | fp16
  int64_t overlap_steps = 0;        // apply a non-blocking average k steps later; 0 = blocking
  int64_t bucket_mb = 0;            // 0 = one fused buffer
  bool consistency_check = true;
};

struct CheckpointConfig {
  std::string dir;           // default: <output_dir>/checkpoints
  int64_t every_steps = 0;   // 0 = only at the end and on signals
  int64_t keep = 2;
  bool save_final = true;
};

struct LogConfig {
  int64_t every_steps = 10;
  std::string level = "info";
  bool all_ranks = false;
  std::string metrics_file = "metrics.jsonl";
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
};

// Parses a TOML file (may be empty for defaults only) and applies "section.key=value" overrides.
// Throws ht::Error(kUsage) naming the key on any unknown key, wrong type or bad value.
Config load(const std::string& path, const std::vector<std::string>& overrides);
// Same from TOML text (e.g. the config stored inside a checkpoint); origin names it in errors.
Config load_text(const std::string& toml_text, const std::string& origin, const std::vector<std::string>& overrides);
void apply_override(Config& cfg, const std::string& assignment);
// Checks cross-key constraints that do not need the dataset.
void validate(const Config& cfg);
// Resolved config as TOML text (stored in checkpoints, written to the output dir, --dump-config).
std::string to_toml(const Config& cfg);
// One line per key: name, type, default, help.
std::string describe_keys();

}  // namespace ht::config
