// `hpctrain train --config FILE [--set section.key=value ...] [--resume | --resume-from FILE]`
#include <iostream>

#include "app/commands.h"
#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/signals.h"
#include "train/data_parallel/data_parallel.h"
#include "train/run_setup.h"
#include "train/trainer.h"

namespace ht::app {
namespace {

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  bool resume = false;
  std::string resume_from;
  bool dump_config = false;
  bool help_config = false;
  bool config_docs = false;
  config::Config cfg;
  train::RunSetup setup;
  std::vector<fs::DirectoryLock> locks;  // the run's directories, held until the process ends
};

// Rank 0 prints "rank R on host H" for every rank: multi-node runs show their distinct hosts.
void log_rank_hosts(comm::Communicator& comm) {
  constexpr size_t kWidth = 64;
  std::string mine = comm.hostname().substr(0, kWidth - 1);
  mine.resize(kWidth, '\0');
  std::string all(kWidth * static_cast<size_t>(comm.size()), '\0');
  comm.allgather(mine.data(), all.data(), kWidth);
  HT_INFO("hpctrain {} | {} ranks", HPCTRAIN_VERSION, comm.size());
  for (int r = 0; r < comm.size(); ++r) HT_INFO("rank {} on host {}", r, all.substr(r * kWidth, kWidth).c_str());
}

Phases configure_train(CLI::App& sub) {
  auto args = std::make_shared<TrainArgs>();
  sub.add_option("--config", args->config_path, "TOML config file (see docs/config.md)");
  sub.add_option("--set", args->overrides, "override a key: section.key=value (repeatable)")->take_all();
  auto* resume = sub.add_flag("--resume", args->resume, "continue from the newest valid checkpoint, if any");
  sub.add_option("--resume-from", args->resume_from, "continue from this checkpoint file")->excludes(resume);
  sub.add_flag("--dump-config", args->dump_config, "print the resolved config and exit");
  sub.add_flag("--help-config", args->help_config, "list every config key with its type, default and meaning");
  sub.add_flag("--help-config-markdown", args->config_docs, "the same as the Markdown tables of docs/config.md");
  Phases p;
  p.setup = [args](Context& ctx) {
    if (args->help_config || args->config_docs) return;
    // From here on SIGTERM/SIGUSR1 only set a flag: a pre-emption during start-up (config, data
    // checks, model build, a long resume) is honoured after the first step (checkpoint, exit 75)
    // instead of killing the rank. Only the MPI start itself remains unprotected.
    signals::install();
    args->cfg = config::load(args->config_path, args->overrides);
    log::set_level(args->cfg.log.level);
    log::set_all_ranks(args->cfg.log.all_ranks);
    if (args->dump_config) return;
    args->setup = train::resolve_run(args->cfg);
    train::check_world(args->setup.cfg, ctx.comm.size(), ctx.comm.local_size());
    args->locks = train::prepare_output_dirs(args->setup.cfg, ctx.comm.rank() == 0);
  };
  p.run = [args](Context& ctx) -> int {
    if (args->help_config) {
      if (ctx.comm.rank() == 0) std::cout << "Config keys (section.key  type  default  meaning):\n" << config::describe_keys();
      return 0;
    }
    if (args->config_docs) {
      if (ctx.comm.rank() == 0) std::cout << config::describe_keys_markdown();
      return 0;
    }
    if (args->dump_config) {
      if (ctx.comm.rank() == 0) std::cout << config::to_toml(args->cfg);
      return 0;
    }
    log_rank_hosts(ctx.comm);
    train::ResumeRequest resume{args->resume, args->resume_from};
    train::Trainer trainer(args->setup, ctx.comm, resume);
    return trainer.run();
  };
  return p;
}

const Registrar kTrain{Command{"train", "train a model (config file + --set overrides)", configure_train}};

}  // namespace
}  // namespace ht::app
