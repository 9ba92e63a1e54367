#include "config/config.h"

#include <sys/stat.h>

#include <toml++/toml.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <type_traits>

#include "config/codec.h"
#include "core/error.h"

namespace ht::config {
namespace {

using detail::bad;
using detail::Codec;


struct Key {
  std::string name;  // section.key
  std::string type;  // for help: int, float, bool, string, or the enum's choices
  std::string help;
  std::function<void(Config&, const toml::node&)> set_toml;
  std::function<void(Config&, const std::string&)> set_text;
  std::function<std::string(const Config&)> literal;  // the value as a TOML literal
};

// C: how the field is read and printed; a key with a special literal (local_sgd.steps = "auto") names
// its own codec, every other key uses its type's.
template <typename C = void, typename Section, typename T>
Key make_key(std::string name, Section Config::*section, T Section::*field, std::string help) {
  using Co = std::conditional_t<std::is_void_v<C>, Codec<T>, C>;
  Key k;
  k.type = Co::type();
  k.help = std::move(help);
  k.set_toml = [name, section, field](Config& c, const toml::node& n) {
    (c.*section).*field = Co::from_toml(name, n);
  };
  k.set_text = [name, section, field](Config& c, const std::string& s) {
    (c.*section).*field = Co::from_text(name, s);
  };
  k.literal = [section, field](const Config& c) { return Co::literal((c.*section).*field); };
  k.name = std::move(name);
  return k;
}

#define HT_KEY(sec, field, help) make_key(#sec "." #field, &Config::sec, &decltype(Config::sec)::field, help)

const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      HT_KEY(model, task, "what the model predicts: the next token, or one label per sample"),
      HT_KEY(model, n_layer, "transformer blocks"),
      HT_KEY(model, n_head, "attention heads (must divide d_model)"),
      HT_KEY(model, d_model, "embedding width"),
      HT_KEY(model, seq_len, "training context length in tokens"),
      HT_KEY(model, max_seq_len, "position table size; 0 = seq_len"),
      HT_KEY(model, vocab_size, "vocabulary size; 0 = from the dataset"),
      HT_KEY(model, num_labels, "classification labels; 0 = from the dataset"),
      HT_KEY(model, dropout, "dropout probability in [0, 1)"),
      HT_KEY(model, bias, "biases in linear layers and norms"),
      HT_KEY(model, attention,
             "attention core: sdpa (ATen's fused scaled_dot_product_attention), eager (matmul, masked softmax, "
             "matmul; keeps the probabilities, B x n_head x seq_len^2 per block); auto = eager for bf16 autocast on a "
             "CPU up to 512 positions, where it measured faster, else sdpa; the run's config.toml and checkpoints "
             "store the choice and a resumed run keeps it"),
      HT_KEY(model, init_from,
             "start from these weights (fresh optimizer, step 0): a Hugging Face GPT-2 directory (config.json + "
             "model.safetensors) or an hpctrain checkpoint; skipped when the run resumes; empty = random init"),
      make_key("data.path", &Config::data, &DataConfig::paths,
               "HDF5 dataset file(s) from `hpctrain prepare`: a path, a glob (data/part-*.h5), or a list of shards "
               "(TOML array, or ',' between paths); shards are read in sorted path order; the resolved config "
               "stores the files it matched"),
      HT_KEY(data, shuffle, "shuffle samples each epoch (deterministic from seed, epoch)"),
      HT_KEY(data, seed, "sampler seed"),
      HT_KEY(data, prefetch_batches, "batches read ahead on a background thread"),
      HT_KEY(train, output_dir, "run directory: metrics.jsonl, config.toml, checkpoints/"),
      HT_KEY(train, micro_batch_size, "samples per rank per micro-step"),
      HT_KEY(train, grad_accum_steps, "micro-steps per optimizer step"),
      HT_KEY(train, max_steps, "optimizer steps; 0 = train.epochs"),
      HT_KEY(train, epochs, "epochs when max_steps = 0"),
      HT_KEY(train, lr, "peak learning rate"),
      HT_KEY(train, min_lr, "final learning rate of cosine/linear decay"),
      HT_KEY(train, warmup_steps, "linear warmup steps"),
      HT_KEY(train, lr_schedule, "decay after warmup"),
      HT_KEY(train, optimizer, "the optimizer: AdamW, or SGD with momentum (train.momentum)"),
      HT_KEY(train, weight_decay,
             "weight decay on matmul weights (not on norms, biases, embeddings): decoupled for AdamW, L2 for SGD"),
      HT_KEY(train, momentum, "SGD momentum (train.optimizer = sgd)"),
      HT_KEY(train, beta1, "AdamW beta1"),
      HT_KEY(train, beta2, "AdamW beta2"),
      HT_KEY(train, eps, "AdamW epsilon"),
      HT_KEY(train, grad_clip, "clip gradients to this global norm; 0 = off"),
      HT_KEY(train, seed, "model init and dropout seed"),
      HT_KEY(train, device, "where to train: auto = cuda:<local rank> when CUDA is available"),
      HT_KEY(train, autocast,
             "mixed precision: bf16 matmuls and attention in the forward pass, fp32 weights, optimizer and loss "
             "(CUDA, or a CPU with native bf16: AVX512-BF16 or AMX)"),
      HT_KEY(train, autocast_emulated, "allow train.autocast = bf16 on a CPU without native bf16 (emulated, slow)"),
      HT_KEY(train, optimizer_impl,
             "AdamW kernel: fused (one kernel over all tensors), foreach, plain (per tensor); auto = fused"),
      HT_KEY(train, shard_optimizer,
             "ZeRO-1: gradients reduce-scattered, each rank updates its 1/W of the parameters with its 1/W of the "
             "optimizer state, parameters all-gathered (per-step data parallel; with local SGD, inside the groups of "
             "local_sgd.group_size != 1)"),
      HT_KEY(train, threads, "intra-op threads per rank; 0 = cores / ranks on the node"),
      HT_KEY(train, nan_policy, "what a NaN/inf loss does: stop the run or skip the step"),
      HT_KEY(train, peak_flops, "peak FLOP/s per rank for MFU; 0 = measure with a matmul at start"),
      HT_KEY(train, deterministic, "torch deterministic algorithms"),
      HT_KEY(train, retain_freed_memory,
             "keep freed memory in the process for the next step's allocations (glibc: no mmap per large "
             "block, no heap trimming) instead of returning it to the OS and page-faulting it back every step; "
             "resident memory stays at its high-water mark"),
      HT_KEY(train, early_stopping_patience,
             "stop after this many evaluations in a row without an improvement of checkpoint.best_metric; 0 = off"),
      HT_KEY(train, early_stopping_threshold, "an evaluation improves only if it beats the best by more than this"),
      HT_KEY(train, target_eval_loss,
             "stop (checkpoint, exit 0) after the first evaluation whose eval_loss is at or below this: time-to-"
             "quality runs; 0 = off"),
      HT_KEY(train, sample_every_steps,
             "rank 0 logs a continuation of train.sample_prompt every N steps (private RNG: training unchanged); "
             "0 = off"),
      HT_KEY(train, sample_prompt, "prompt of the samples logged during training"),
      HT_KEY(train, sample_tokens, "new tokens per logged sample"),
      HT_KEY(train, sample_temperature, "temperature of the logged samples; 0 = greedy"),
      HT_KEY(eval, strategy, "when to evaluate"),
      HT_KEY(eval, every_steps, "evaluate every N steps (strategy = steps)"),
      HT_KEY(eval, batch_size, "samples per rank per evaluation batch"),
      HT_KEY(eval, max_batches,
             "limit evaluation to a fixed seeded random subset (seed data.seed) of max_batches x batch_size "
             "validation samples in all, the same for any rank count; 0 = whole validation set"),
      HT_KEY(recompute, policy, "which blocks drop and recompute their activations"),
      HT_KEY(recompute, k, "every_k: recompute blocks whose index is a multiple of k"),
      HT_KEY(recompute, first_n, "every_k: recompute the first N blocks instead (0 = use k)"),
      HT_KEY(recompute, attention_core,
             "selective: recompute the attention core too (scores, softmax, dropout; saves its s^2 memory) "
             "or keep its outputs (false: cheaper, saves less)"),
      HT_KEY(local_sgd, enabled, "local SGD; false = per-step gradient all-reduce"),
      make_key<detail::CountOrAutoCodec>(
          "local_sgd.steps", &Config::local_sgd, &LocalSgdConfig::steps,
          "local optimizer steps N between parameter averages; auto = measure the compute step and the link at "
          "start and choose N from the cost model, with local_sgd.fragments and comm_dtype where those are auto "
          "too (printed with the reason; a resumed run keeps its checkpoint's choice)"),
      HT_KEY(local_sgd, warmup_steps, "synchronous gradient-averaged steps before local SGD starts"),
      HT_KEY(local_sgd, average_buffers, "average module buffers too"),
      HT_KEY(local_sgd, optimizer_state, "AdamW moments at each sync: kept per rank or averaged"),
      HT_KEY(local_sgd, outer, "plain average, or DiLoCo's outer Nesterov SGD on the pseudo-gradient"),
      HT_KEY(local_sgd, outer_lr, "DiLoCo outer learning rate (the paper: 0.7 for ~500 inner steps)"),
      HT_KEY(local_sgd, outer_momentum, "DiLoCo outer Nesterov momentum (the paper: 0.9 for ~500 inner steps)"),
      HT_KEY(local_sgd, nesterov, "DiLoCo Nesterov momentum"),
      HT_KEY(local_sgd, comm_dtype,
             "exchange precision (fp32 accumulation); int8/int4 quantize the change since the last exchange "
             "with one fp32 scale per local_sgd.quant_block elements; auto (with local_sgd.steps = auto) = the "
             "one the cost model predicts fastest, a coarser one only when >= 2 % faster"),
      HT_KEY(local_sgd, quant_block, "int8/int4 exchange: elements per fp32 scale"),
      make_key<detail::CountOrAutoCodec>(
          "local_sgd.fragments", &Config::local_sgd, &LocalSgdConfig::fragments,
          "streaming: split the parameters into F fragments of whole blocks; fragment f is exchanged at step "
          "f x steps / F of each cycle, so the link carries one fragment at a time; auto (with local_sgd.steps = "
          "auto) = F in 1, 2, 4, ... n_layer chosen with N (more fragments pay only with overlap_steps >= 1)"),
      HT_KEY(local_sgd, group_size,
             "hierarchical: ranks per group (consecutive ranks) that average gradients every step; local SGD "
             "runs across groups; 0 = the ranks of one node; 1 = flat"),
      HT_KEY(local_sgd, overlap_steps, "apply a non-blocking average this many steps later; 0 = blocking"),
      HT_KEY(local_sgd, bucket_mb, "bucket size in MiB; 0 = one fused buffer (overlapped gradient all-reduce: 1 MiB)"),
      HT_KEY(local_sgd, overlap_grad_allreduce,
             "per-step gradient all-reduce (enabled = false, warmup) in buckets started during backward, a "
             "point-to-point ring in fp32; across capped links faster than blocking, on one host slower "
             "(docs/scaling.md, the overlapped gradient all-reduce)"),
      HT_KEY(local_sgd, auto_step_penalty,
             "local_sgd.steps = auto: extra steps to a given loss per doubling of N, as a fraction of the per-step "
             "mode's (fitted on the demo by jobs/bench/steps_to_loss.py: N = 2..32 took 1.08-1.22x the steps over "
             "three seeds, docs/local-sgd.md)"),
      HT_KEY(local_sgd, consistency_check, "verify a parameter checksum on all ranks after each sync"),
      HT_KEY(checkpoint, dir, "checkpoint directory; empty = <output_dir>/checkpoints"),
      HT_KEY(checkpoint, every_steps, "save every N steps; 0 = at the end and on signals only"),
      HT_KEY(checkpoint, keep, "checkpoints kept (>= 2)"),
      HT_KEY(checkpoint, save_final, "save a checkpoint when training ends"),
      HT_KEY(checkpoint, allow_dataset_change,
             "resume although data.path now holds other data than the checkpoint was trained on"),
      HT_KEY(checkpoint, keep_best,
             "keep the checkpoint of the best evaluation (best-<step>.h5, pointer `best`) outside the rotation"),
      HT_KEY(checkpoint, best_metric, "evaluation metric that decides the best checkpoint and early stopping"),
      HT_KEY(checkpoint, greater_is_better,
             "whether a larger best_metric is better; auto = false for loss/perplexity, true for accuracy/F1"),
      HT_KEY(log, every_steps, "console/metrics line every N steps"),
      HT_KEY(log, level, "console verbosity"),
      HT_KEY(log, all_ranks, "show info lines of every rank (each prefixed with its rank)"),
      HT_KEY(log, metrics_file, "JSONL metrics file name inside output_dir"),
      HT_KEY(log, trace_steps, "Chrome trace (Perfetto) of the phases of steps A..B (rankR.json) and of their "
                               "operators from torch's profiler (rankR.ops.json), one pair per rank in "
                               "<output_dir>/trace/; empty = none"),
      HT_KEY(log, tensorboard, "also write every metrics line and the config as TensorBoard events in output_dir"),
      HT_KEY(log, plot, "write loss.png (and accuracy.png for classification) in output_dir at the end (gnuplot)"),
  };
  return k;
}
#undef HT_KEY

const Key* find_key(const std::string& name) {
  for (const auto& k : keys())
    if (k.name == name) return &k;
  return nullptr;
}

void apply_table(Config& cfg, const toml::table& root, const std::string& origin) {
  for (const auto& [section, node] : root) {
    const auto* table = node.as_table();
    if (!table) bad(std::string(section.str()), fmt::format("expected a [section] table in {}", origin));
    for (const auto& [name, value] : *table) {
      const std::string full = fmt::format("{}.{}", section.str(), name.str());
      const Key* k = find_key(full);
      if (!k) bad(full, fmt::format("unknown key in {}", origin));
      k->set_toml(cfg, value);
    }
  }
}

Config finish_load(Config cfg, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) apply_override(cfg, o);
  validate(cfg);
  return cfg;
}

}  // namespace

std::string Config::checkpoint_dir() const {
  return checkpoint.dir.empty() ? train.output_dir + "/checkpoints" : checkpoint.dir;
}

bool Config::greater_is_better() const {
  if (checkpoint.greater_is_better != AutoBool::kAuto) return checkpoint.greater_is_better == AutoBool::kTrue;
  return checkpoint.best_metric == EvalMetric::kEvalAccuracy || checkpoint.best_metric == EvalMetric::kEvalF1;
}

void apply_override(Config& cfg, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    HT_FAIL(ExitCode::kUsage, "--set expects section.key=value, got '{}'", assignment);
  const std::string name = assignment.substr(0, eq);
  const Key* k = find_key(name);
  if (!k) bad(name, "unknown key (see `hpctrain train --help-config`)");
  k->set_text(cfg, assignment.substr(eq + 1));
}

Config load(const std::string& path, const std::vector<std::string>& overrides) {
  Config cfg;
  if (!path.empty()) {
    struct stat st {};
    HT_REQUIRE(::stat(path.c_str(), &st) == 0, ExitCode::kUsage, "config file {}: not found", path);
    HT_REQUIRE(S_ISREG(st.st_mode), ExitCode::kUsage, "config file {}: not a regular file{}", path,
               S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
    toml::table root;
    try {
      root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      const auto& src = e.source();
      HT_FAIL(ExitCode::kUsage, "config file {}: {} (line {}, column {})", path, e.description(), src.begin.line,
              src.begin.column);
    }
    apply_table(cfg, root, path);
  }
  return finish_load(cfg, overrides);
}

Config load_text(const std::string& toml_text, const std::string& origin, const std::vector<std::string>& overrides) {
  Config cfg;
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    HT_FAIL(ExitCode::kUsage, "config in {}: {} (line {})", origin, e.description(), e.source().begin.line);
  }
  apply_table(cfg, root, origin);
  return finish_load(cfg, overrides);
}

std::string to_toml(const Config& cfg) {
  std::ostringstream out;
  std::string section;
  for (const auto& k : keys()) {
    const auto dot = k.name.find('.');
    const std::string sec = k.name.substr(0, dot);
    if (sec != section) {
      out << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    out << k.name.substr(dot + 1) << " = " << k.literal(cfg) << "\n";
  }
  return out.str();
}

std::string describe_keys() {
  const Config defaults;
  std::ostringstream out;
  for (const auto& k : keys())
    out << fmt::format("  {:<28} {:<7} default {:<14} {}\n", k.name, k.type, k.literal(defaults), k.help);
  return out.str();
}

std::string describe_keys_markdown() {
  const Config defaults;
  std::ostringstream out;
  std::string section;
  auto escape = [](std::string s) {
    for (size_t p = 0; (p = s.find('|', p)) != std::string::npos; p += 2) s.replace(p, 1, "\\|");
    return s;
  };
  for (const auto& k : keys()) {
    const std::string sec = k.name.substr(0, k.name.find('.'));
    if (sec != section) {
      out << (section.empty() ? "" : "\n") << "## [" << sec << "]\n\n| key | type | default | meaning |\n"
          << "| --- | --- | --- | --- |\n";
      section = sec;
    }
    out << fmt::format("| `{}` | {} | `{}` | {} |\n", k.name, escape(k.type), k.literal(defaults), escape(k.help));
  }
  return out.str();
}

}  // namespace ht::config
