#include "config/config.h"

#include <toml++/toml.h>

#include <cmath>
#include <functional>
#include <sstream>

#include "core/error.h"

namespace ht::config {
namespace {

struct Key {
  std::string name;  // section.key
  std::function<void*(Config&)> ref;
  char type;  // i, d, b, s
  std::string help;
};

#define HT_KEY(sec, field, t, help) \
  Key { #sec "." #field, [](Config& c) -> void* { return &c.sec.field; }, t, help }

const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      HT_KEY(model, task, 's', "causal-lm | classification"),
      HT_KEY(model, n_layer, 'i', "transformer blocks"),
      HT_KEY(model, n_head, 'i', "attention heads (must divide d_model)"),
      HT_KEY(model, d_model, 'i', "embedding width"),
      HT_KEY(model, seq_len, 'i', "training context length in tokens"),
      HT_KEY(model, max_seq_len, 'i', "position table size; 0 = seq_len"),
      HT_KEY(model, vocab_size, 'i', "vocabulary size; 0 = from the dataset"),
      HT_KEY(model, num_labels, 'i', "classification labels; 0 = from the dataset"),
      HT_KEY(model, dropout, 'd', "dropout probability in [0, 1)"),
      HT_KEY(model, bias, 'b', "biases in linear layers and norms"),
      HT_KEY(data, path, 's', "HDF5 dataset file from `hpctrain prepare`"),
      HT_KEY(data, shuffle, 'b', "shuffle samples each epoch (deterministic from seed, epoch)"),
      HT_KEY(data, seed, 'i', "sampler seed"),
      HT_KEY(data, prefetch_batches, 'i', "batches read ahead on a background thread"),
      HT_KEY(train, output_dir, 's', "run directory: metrics.jsonl, config.toml, checkpoints/"),
      HT_KEY(train, micro_batch_size, 'i', "samples per rank per micro-step"),
      HT_KEY(train, grad_accum_steps, 'i', "micro-steps per optimizer step"),
      HT_KEY(train, max_steps, 'i', "optimizer steps; 0 = train.epochs"),
      HT_KEY(train, epochs, 'i', "epochs when max_steps = 0"),
      HT_KEY(train, lr, 'd', "peak learning rate"),
      HT_KEY(train, min_lr, 'd', "final learning rate of cosine/linear decay"),
      HT_KEY(train, warmup_steps, 'i', "linear warmup steps"),
      HT_KEY(train, lr_schedule, 's', "cosine | linear | constant"),
      HT_KEY(train, weight_decay, 'd', "AdamW decoupled weight decay (not on norms, biases, embeddings)"),
      HT_KEY(train, beta1, 'd', "AdamW beta1"),
      HT_KEY(train, beta2, 'd', "AdamW beta2"),
      HT_KEY(train, eps, 'd', "AdamW epsilon"),
      HT_KEY(train, grad_clip, 'd', "clip gradients to this global norm; 0 = off"),
      HT_KEY(train, seed, 'i', "model init and dropout seed"),
      HT_KEY(train, device, 's', "auto | cpu | cuda"),
      HT_KEY(train, autocast, 's', "none | bf16 (CUDA)"),
      HT_KEY(train, threads, 'i', "intra-op threads per rank; 0 = cores / ranks on the node"),
      HT_KEY(train, nan_policy, 's', "stop | skip: what a NaN/inf loss does"),
      HT_KEY(train, peak_flops, 'd', "peak FLOP/s per rank for MFU; 0 = measure with a matmul at start"),
      HT_KEY(train, deterministic, 'b', "torch deterministic algorithms"),
      HT_KEY(eval, strategy, 's', "steps | epoch | no"),
      HT_KEY(eval, every_steps, 'i', "evaluate every N steps (strategy = steps)"),
      HT_KEY(eval, batch_size, 'i', "samples per rank per evaluation batch"),
      HT_KEY(eval, max_batches, 'i', "evaluation batches per rank; 0 = whole validation set"),
      HT_KEY(recompute, policy, 's', "none | full | every_k | selective"),
      HT_KEY(recompute, k, 'i', "every_k: recompute blocks whose index is a multiple of k"),
      HT_KEY(recompute, first_n, 'i', "every_k: recompute the first N blocks instead (0 = use k)"),
      HT_KEY(recompute, attention_core, 'b',
             "selective: recompute the attention core too (scores, softmax, dropout; saves its s^2 memory) "
             "or keep its outputs (false: cheaper, saves less)"),
      HT_KEY(local_sgd, enabled, 'b', "local SGD; false = per-step gradient all-reduce"),
      HT_KEY(local_sgd, steps, 'i', "local optimizer steps between parameter averages"),
      HT_KEY(local_sgd, warmup_steps, 'i', "synchronous gradient-averaged steps before local SGD starts"),
      HT_KEY(local_sgd, average_buffers, 'b', "average module buffers too"),
      HT_KEY(local_sgd, optimizer_state, 's', "local | average: AdamW moments at each sync"),
      HT_KEY(local_sgd, outer, 's', "average | diloco (outer Nesterov SGD on the pseudo-gradient)"),
      HT_KEY(local_sgd, outer_lr, 'd', "DiLoCo outer learning rate"),
      HT_KEY(local_sgd, outer_momentum, 'd', "DiLoCo outer momentum"),
      HT_KEY(local_sgd, nesterov, 'b', "DiLoCo Nesterov momentum"),
      HT_KEY(local_sgd, comm_dtype, 's', "fp32 | bf16 | fp16 exchange (fp32 accumulation)"),
      HT_KEY(local_sgd, overlap_steps, 'i', "apply a non-blocking average this many steps later; 0 = blocking"),
      HT_KEY(local_sgd, bucket_mb, 'i', "bucket size in MiB; 0 = one fused buffer"),
      HT_KEY(local_sgd, consistency_check, 'b', "verify a parameter checksum on all ranks after each sync"),
      HT_KEY(checkpoint, dir, 's', "checkpoint directory; empty = <output_dir>/checkpoints"),
      HT_KEY(checkpoint, every_steps, 'i', "save every N steps; 0 = at the end and on signals only"),
      HT_KEY(checkpoint, keep, 'i', "checkpoints kept (>= 2)"),
      HT_KEY(checkpoint, save_final, 'b', "save a checkpoint when training ends"),
      HT_KEY(log, every_steps, 'i', "console/metrics line every N steps"),
      HT_KEY(log, level, 's', "trace | debug | info | warn | error"),
      HT_KEY(log, all_ranks, 'b', "show info lines of every rank"),
      HT_KEY(log, metrics_file, 's', "JSONL metrics file name inside output_dir"),
  };
  return k;
}
#undef HT_KEY

const Key* find_key(const std::string& name) {
  for (const auto& k : keys())
    if (k.name == name) return &k;
  return nullptr;
}

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  HT_FAIL(ExitCode::kUsage, "config key '{}': {}", name, why);
}

void set_from_toml(Config& cfg, const Key& k, const toml::node& node) {
  void* p = k.ref(cfg);
  switch (k.type) {
    case 'i':
      if (!node.is_integer()) bad(k.name, "expected an integer");
      *static_cast<int64_t*>(p) = node.as_integer()->get();
      break;
    case 'd':
      if (node.is_integer()) *static_cast<double*>(p) = static_cast<double>(node.as_integer()->get());
      else if (node.is_floating_point()) *static_cast<double*>(p) = node.as_floating_point()->get();
      else bad(k.name, "expected a number");
      break;
    case 'b':
      if (!node.is_boolean()) bad(k.name, "expected true or false");
      *static_cast<bool*>(p) = node.as_boolean()->get();
      break;
    case 's':
      if (!node.is_string()) bad(k.name, "expected a string");
      *static_cast<std::string*>(p) = node.as_string()->get();
      break;
  }
}

void set_from_text(Config& cfg, const Key& k, const std::string& text) {
  void* p = k.ref(cfg);
  try {
    size_t used = 0;
    switch (k.type) {
      case 'i': *static_cast<int64_t*>(p) = std::stoll(text, &used); break;
      case 'd': *static_cast<double*>(p) = std::stod(text, &used); break;
      case 'b':
        if (text == "true" || text == "1") *static_cast<bool*>(p) = true;
        else if (text == "false" || text == "0") *static_cast<bool*>(p) = false;
        else bad(k.name, fmt::format("expected true or false, got '{}'", text));
        return;
      case 's': *static_cast<std::string*>(p) = text; return;
    }
    if (used != text.size()) throw std::invalid_argument("trailing characters");
  } catch (const std::logic_error&) {
    bad(k.name, fmt::format("cannot parse '{}' as {}", text, k.type == 'i' ? "an integer" : "a number"));
  }
}

void require_one_of(const std::string& name, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return;
    list += list.empty() ? a : std::string(", ") + a;
  }
  bad(name, fmt::format("'{}' is not one of: {}", v, list));
}

}  // namespace

std::string Config::checkpoint_dir() const {
  return checkpoint.dir.empty() ? train.output_dir + "/checkpoints" : checkpoint.dir;
}

void apply_override(Config& cfg, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    HT_FAIL(ExitCode::kUsage, "--set expects section.key=value, got '{}'", assignment);
  const std::string name = assignment.substr(0, eq);
  const Key* k = find_key(name);
  if (!k) bad(name, "unknown key (see `hpctrain train --help-config`)");
  set_from_text(cfg, *k, assignment.substr(eq + 1));
}

namespace {
void apply_table(Config& cfg, const toml::table& root, const std::string& origin) {
  for (const auto& [section, node] : root) {
    const auto* table = node.as_table();
    if (!table) bad(std::string(section.str()), "expected a [section] table");
    for (const auto& [name, value] : *table) {
      const std::string full = fmt::format("{}.{}", section.str(), name.str());
      const Key* k = find_key(full);
      if (!k) bad(full, fmt::format("unknown key in {}", origin));
      set_from_toml(cfg, *k, value);
    }
  }
}

Config finish_load(Config cfg, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) apply_override(cfg, o);
  validate(cfg);
  return cfg;
}
}  // namespace

Config load(const std::string& path, const std::vector<std::string>& overrides) {
  Config cfg;
  if (!path.empty()) {
    toml::table root;
    try {
      root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      const auto& src = e.source();
      HT_FAIL(ExitCode::kUsage, "config file {}: {} (line {}, column {})", path, e.description(),
              src.begin.line, src.begin.column);
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

void validate(const Config& c) {
  require_one_of("model.task", c.model.task, {"causal-lm", "classification"});
  if (c.model.n_layer < 1) bad("model.n_layer", "must be >= 1");
  if (c.model.n_head < 1) bad("model.n_head", "must be >= 1");
  if (c.model.d_model < 1) bad("model.d_model", "must be >= 1");
  if (c.model.d_model % c.model.n_head != 0)
    bad("model.n_head", fmt::format("{} heads do not divide model.d_model = {}", c.model.n_head, c.model.d_model));
  if (c.model.seq_len < 1) bad("model.seq_len", "must be >= 1");
  if (c.model.max_seq_len != 0 && c.model.seq_len > c.model.max_seq_len)
    bad("model.seq_len", fmt::format("{} exceeds model.max_seq_len = {}", c.model.seq_len, c.model.max_seq_len));
  if (c.model.vocab_size < 0) bad("model.vocab_size", "must be >= 0");
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
  require_one_of("train.lr_schedule", c.train.lr_schedule, {"cosine", "linear", "constant"});
  if (c.train.weight_decay < 0) bad("train.weight_decay", "must be >= 0");
  if (!(c.train.beta1 >= 0 && c.train.beta1 < 1)) bad("train.beta1", "must be in [0, 1)");
  if (!(c.train.beta2 >= 0 && c.train.beta2 < 1)) bad("train.beta2", "must be in [0, 1)");
  if (!(c.train.eps > 0)) bad("train.eps", "must be > 0");
  if (c.train.grad_clip < 0) bad("train.grad_clip", "must be >= 0");
  require_one_of("train.device", c.train.device, {"auto", "cpu", "cuda"});
  require_one_of("train.autocast", c.train.autocast, {"none", "bf16"});
  if (c.train.threads < 0) bad("train.threads", "must be >= 0");
  require_one_of("train.nan_policy", c.train.nan_policy, {"stop", "skip"});
  if (c.train.peak_flops < 0) bad("train.peak_flops", "must be >= 0");
  require_one_of("eval.strategy", c.eval.strategy, {"steps", "epoch", "no"});
  if (c.eval.strategy == "steps" && c.eval.every_steps < 1)
    bad("eval.every_steps", "must be >= 1 when eval.strategy = steps");
  if (c.eval.batch_size < 1) bad("eval.batch_size", "must be >= 1");
  if (c.eval.max_batches < 0) bad("eval.max_batches", "must be >= 0");
  require_one_of("recompute.policy", c.recompute.policy, {"none", "full", "every_k", "selective"});
  if (c.recompute.policy == "every_k") {
    if (c.recompute.first_n < 0 || c.recompute.first_n > c.model.n_layer)
      bad("recompute.first_n", fmt::format("must be in [0, model.n_layer = {}]", c.model.n_layer));
    if (c.recompute.first_n == 0 && (c.recompute.k < 1 || c.recompute.k > c.model.n_layer))
      bad("recompute.k", fmt::format("must be in [1, model.n_layer = {}]", c.model.n_layer));
  }
  if (c.local_sgd.steps < 1) bad("local_sgd.steps", "must be >= 1");
  if (c.local_sgd.warmup_steps < 0) bad("local_sgd.warmup_steps", "must be >= 0");
  if (c.local_sgd.enabled && c.train.max_steps > 0 && c.local_sgd.warmup_steps >= c.train.max_steps)
    bad("local_sgd.warmup_steps",
        fmt::format("{} is not shorter than train.max_steps = {}", c.local_sgd.warmup_steps, c.train.max_steps));
  require_one_of("local_sgd.optimizer_state", c.local_sgd.optimizer_state, {"local", "average"});
  require_one_of("local_sgd.outer", c.local_sgd.outer, {"average", "diloco"});
  if (!(c.local_sgd.outer_lr > 0)) bad("local_sgd.outer_lr", "must be > 0");
  if (!(c.local_sgd.outer_momentum >= 0 && c.local_sgd.outer_momentum < 1))
    bad("local_sgd.outer_momentum", "must be in [0, 1)");
  require_one_of("local_sgd.comm_dtype", c.local_sgd.comm_dtype, {"fp32", "bf16", "fp16"});
  if (c.local_sgd.overlap_steps < 0) bad("local_sgd.overlap_steps", "must be >= 0");
  if (c.local_sgd.overlap_steps >= c.local_sgd.steps && c.local_sgd.overlap_steps > 0)
    bad("local_sgd.overlap_steps", "must be smaller than local_sgd.steps");
  if (c.local_sgd.bucket_mb < 0) bad("local_sgd.bucket_mb", "must be >= 0");
  if (c.checkpoint.every_steps < 0) bad("checkpoint.every_steps", "must be >= 0");
  if (c.checkpoint.keep < 2) bad("checkpoint.keep", "must be >= 2 so a damaged newest file has a fallback");
  if (c.log.every_steps < 1) bad("log.every_steps", "must be >= 1");
  require_one_of("log.level", c.log.level, {"trace", "debug", "info", "warn", "error"});
}

std::string to_toml(const Config& cfg) {
  Config copy = cfg;
  std::ostringstream out;
  std::string section;
  for (const auto& k : keys()) {
    const auto dot = k.name.find('.');
    const std::string sec = k.name.substr(0, dot);
    if (sec != section) {
      out << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    out << k.name.substr(dot + 1) << " = ";
    void* p = k.ref(copy);
    switch (k.type) {
      case 'i': out << *static_cast<int64_t*>(p); break;
      case 'd': out << fmt::format("{}", *static_cast<double*>(p)); break;
      case 'b': out << (*static_cast<bool*>(p) ? "true" : "false"); break;
      case 's': out << toml::value<std::string>(*static_cast<std::string*>(p)); break;
    }
    out << "\n";
  }
  return out.str();
}

std::string describe_keys() {
  Config defaults;
  std::ostringstream out;
  for (const auto& k : keys()) {
    void* p = k.ref(defaults);
    std::string def;
    switch (k.type) {
      case 'i': def = std::to_string(*static_cast<int64_t*>(p)); break;
      case 'd': def = fmt::format("{}", *static_cast<double*>(p)); break;
      case 'b': def = *static_cast<bool*>(p) ? "true" : "false"; break;
      case 's': def = "\"" + *static_cast<std::string*>(p) + "\""; break;
    }
    out << fmt::format("  {:<28} {:<7} default {:<14} {}\n", k.name,
                       k.type == 'i' ? "int" : k.type == 'd' ? "float" : k.type == 'b' ? "bool" : "string", def,
                       k.help);
  }
  return out.str();
}

}  // namespace ht::config
