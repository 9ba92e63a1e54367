// `hpctrain prepare`: builds a dataset file from text (under mpirun: one shard per rank), or with
// --check FILE validates an existing one the way training reads it, on every rank.
#include <memory>

#include "app/commands.h"
#include "config/path_list.h"
#include "core/error.h"
#include "core/log.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prepare.h"

namespace ht::app {
namespace {

struct PrepareArgs {
  data::PrepareOptions opts;
  std::string tokenizer = "byte";
  std::string check;          // dataset file to validate instead of preparing
  int64_t micro_batch = 8;    // --check: per-rank micro-batch
  int64_t grad_accum = 1;
};

// Every rank opens the file, reads its share of one training epoch and of the validation split.
void check_dataset(const PrepareArgs& a, comm::Communicator& comm) {
  const auto dataset = data::open_dataset(config::split_path_list("--check", a.check), "--check");
  const data::DatasetMeta& meta = dataset->meta();
  const int64_t seq_len = meta.task == config::Task::kClassification ? 0 : a.opts.seq_len;
  data::LoaderOptions lo;
  lo.seq_len = seq_len;
  lo.micro_batch = a.micro_batch;
  lo.grad_accum = a.grad_accum;
  lo.seed = a.opts.seed;
  lo.model_vocab_size = a.opts.vocab_size;
  data::Loader loader(dataset, lo, comm);
  int64_t tokens = 0;
  for (int64_t i = 0; i < loader.steps_per_epoch() * a.grad_accum; ++i) tokens += loader.next().num_tokens;
  int64_t val_samples = 0;
  if (data::num_samples(meta, "val", seq_len) > 0) {
    data::EvalReader eval(dataset, "val", seq_len, a.micro_batch, comm);
    data::Batch b;
    while (eval.next(b)) val_samples += b.input.size(0);
  }
  HT_INFO("check: {} ok ({}; train: {} samples, {} steps/epoch of {} ranks x {} x {}, {} tokens read on rank 0; "
          "val: {} samples on rank 0)",
          a.check, config::name_of(meta.task), loader.samples_per_epoch(), loader.steps_per_epoch(), comm.size(), a.grad_accum,
          a.micro_batch, tokens, val_samples);
}

Phases configure(CLI::App& sub) {
  auto a = std::make_shared<PrepareArgs>();
  auto& o = a->opts;
  sub.add_option("--input", o.inputs, "text file or directory (repeatable; with --labels-from-dirs: [NAME=]PATH per label)");
  sub.add_option("--output", o.output,
                 "dataset file to write (HDF5); under mpirun -np R: R shards OUT-<rank:05d>-of-<R:05d>.h5");
  sub.add_option("--tokenizer", a->tokenizer, "byte | bpe")->capture_default_str();
  sub.add_option("--vocab-size", o.vocab_size,
                 "bpe: vocabulary size (>= 258, 0 = 1024); with --check: the model's vocab_size to check against");
  sub.add_option("--val-fraction", o.val_fraction, "share of documents in the validation split")->capture_default_str();
  sub.add_flag("--labels-from-dirs", o.labels_from_dirs, "classification: each --input is one label");
  sub.add_option("--seq-len", o.seq_len, "classification row width; with --check: causal-lm context")
      ->capture_default_str();
  sub.add_option("--seed", o.seed, "seed of the train/val split (and of --check's shuffle)")->capture_default_str();
  sub.add_option("--check", a->check, "validate an existing dataset file (or shards: a glob or a list) on every rank instead of preparing");
  sub.add_option("--micro-batch", a->micro_batch, "--check: per-rank micro-batch")->capture_default_str();
  sub.add_option("--grad-accum", a->grad_accum, "--check: micro-steps per step")->capture_default_str();
  Phases p;
  // All the work happens in setup: its errors are agreed across ranks, so nobody hangs.
  p.setup = [a](Context& ctx) {
    if (!a->check.empty()) {
      check_dataset(*a, ctx.comm);
      return;
    }
    HT_REQUIRE(!a->opts.inputs.empty() && !a->opts.output.empty(), ExitCode::kUsage,
               "prepare: --input and --output are required (or --check FILE)");
    const auto kind = config::parse_enum<data::TokenizerKind>(a->tokenizer);
    HT_REQUIRE(kind.has_value(), ExitCode::kUsage, "prepare: --tokenizer '{}' must be one of: {}", a->tokenizer,
               config::choices<data::TokenizerKind>());
    a->opts.tokenizer = *kind;
    // Under mpirun every rank writes one shard (docs/data-format.md, "Shards").
    if (ctx.comm.size() > 1) data::prepare_shards(a->opts, ctx.comm);
    else data::prepare(a->opts);
  };
  p.run = [](Context&) { return 0; };
  return p;
}

const Registrar kRegistrar{Command{"prepare", "build a dataset file from text files (see docs/data-format.md)", configure}};

}  // namespace
}  // namespace ht::app
