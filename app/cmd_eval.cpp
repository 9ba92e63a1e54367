// `hpctrain eval --checkpoint FILE|best|latest [--config FILE] [--set ...]`: evaluation metrics of a
// saved model. Without --config, the config stored inside the checkpoint is used. `best` and
// `latest` are the pointers in the checkpoint directory of the run that --config and --set
// describe (checkpoint.dir, else <train.output_dir>/checkpoints).
#include <iostream>

#include "app/commands.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "train/evaluate.h"
#include "train/run_setup.h"

namespace ht::app {
namespace {

struct EvalArgs {
  std::string checkpoint;
  std::string config_path;
  std::vector<std::string> overrides;
  train::RunSetup setup;
};

Phases configure_eval(CLI::App& sub) {
  auto args = std::make_shared<EvalArgs>();
  sub.add_option("--checkpoint", args->checkpoint,
                 "checkpoint file (.h5), or best / latest: that pointer in the checkpoint directory of the run "
                 "given by --config / --set train.output_dir")
      ->required();
  sub.add_option("--config", args->config_path, "config file; default: the config stored in the checkpoint");
  sub.add_option("--set", args->overrides, "override a key: section.key=value (repeatable)")->take_all();
  Phases p;
  p.setup = [args](Context&) {
    if (args->checkpoint == "best" || args->checkpoint == "latest") {
      const config::Config run = config::load(args->config_path, args->overrides);
      args->checkpoint = checkpoint::resolve_pointer(run.checkpoint_dir(), args->checkpoint);
      HT_INFO("evaluating {}", args->checkpoint);
    }
    const config::Config cfg =
        args->config_path.empty()
            ? config::load_text(checkpoint::read_config_text(args->checkpoint), args->checkpoint + ":/config",
                                args->overrides)
            : config::load(args->config_path, args->overrides);
    args->setup = train::resolve_run(cfg);
  };
  p.run = [args](Context& ctx) -> int {
    const auto r = train::evaluate_checkpoint(args->setup, args->checkpoint, ctx.comm);
    if (ctx.comm.rank() == 0) {
      std::cout << fmt::format("eval_loss {:.6f}\neval_accuracy {:.6f}\n", r.loss, r.accuracy);
      if (r.task == config::Task::kCausalLm) std::cout << fmt::format("eval_perplexity {:.4f}\n", r.perplexity);
      else std::cout << fmt::format("eval_f1 {:.6f}\neval_labels_present {}\n", r.f1, r.labels_present);
      std::cout << fmt::format("eval_count {}\n", r.count);
    }
    return 0;
  };
  return p;
}

const Registrar kEval{Command{"eval", "evaluate a checkpoint on the validation split", configure_eval}};

}  // namespace
}  // namespace ht::app
