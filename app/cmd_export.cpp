// `hpctrain export --checkpoint FILE --output DIR [--format hf] [--data FILE] [--force]`: the
// checkpoint's averaged model as a Hugging Face GPT-2 directory (docs/interop.md).
#include <fmt/ranges.h>

#include <iostream>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "interop/export.h"

namespace ht::app {
namespace {

struct ExportArgs {
  interop::ExportOptions options;
  std::string format = "hf";
};

Phases configure_export(CLI::App& sub) {
  auto args = std::make_shared<ExportArgs>();
  sub.add_option("--checkpoint", args->options.checkpoint, "checkpoint file (.h5)")->required();
  sub.add_option("--output", args->options.output_dir, "directory to create (refused when not empty, see --force)")
      ->required();
  sub.add_option("--format", args->format, "output format: hf (transformers GPT2LMHeadModel)")
      ->check(CLI::IsMember({"hf"}));
  sub.add_option("--data", args->options.data_path,
                 "dataset whose tokenizer goes along; default: the data.path stored in the checkpoint");
  sub.add_flag("--force", args->options.force,
               "replace a non-empty --output directory (a previous export; never one holding checkpoints, a run "
               "directory or the --checkpoint file)");
  Phases p;
  // Local work of rank 0 in the set-up phase: its outcome (and message) reaches every rank there.
  p.setup = [args](Context& ctx) {
    if (ctx.comm.rank() != 0) return;
    Stopwatch sw;
    const auto r = interop::export_hf(args->options);
    std::cout << fmt::format("exported {} (step {}, {} parameters) to {}: {} in {:.2f}s\n", args->options.checkpoint,
                             r.step, r.parameters, args->options.output_dir, fmt::join(r.files, ", "), sw.seconds());
  };
  p.run = [](Context&) { return 0; };
  return p;
}

const Registrar kExport{
    Command{"export", "write a checkpoint's model as a Hugging Face GPT-2 directory", configure_export}};

}  // namespace
}  // namespace ht::app
