#include <iostream>
#include <vector>

#include "app/command_line_limit.h"
#include "app/commands.h"
#include "core/hash.h"
#include "core/error.h"
#include "core/log.h"

namespace ht::app {
namespace {

std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

// Every rank reaches this point; the worst exit code wins. A fault every failing rank met alike
// (a config key, a dataset) is printed once, by the lowest failing rank; faults that differ
// between ranks are printed by each rank that met them.
int agree_on_exit(comm::Communicator& comm, int local_code, const std::string& message) {
  const uint64_t mine = local_code == 0 ? 0 : fnv1a(kFnvOffset, fmt::format("{}|{}", local_code, message));
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  comm.allgather(&mine, all.data(), sizeof(mine));
  int first_failing = -1;
  bool alike = true;
  for (int r = 0; r < comm.size(); ++r) {
    if (all[static_cast<size_t>(r)] == 0) continue;
    if (first_failing < 0) first_failing = r;
    alike = alike && all[static_cast<size_t>(r)] == all[static_cast<size_t>(first_failing)];
  }
  if (local_code != 0 && (!alike || comm.rank() == first_failing)) HT_ERROR("{}", message);
  return static_cast<int>(comm.allreduce_max(static_cast<int64_t>(local_code)));
}

// "hpctrain trian ...": CLI11 would only say that a subcommand is required.
std::string unknown_subcommand(int argc, char** argv, const std::vector<Command>& commands) {
  if (argc < 2 || argv[1][0] == '-') return "";
  std::string names;
  for (const auto& c : commands) {
    if (c.name == argv[1]) return "";
    names += (names.empty() ? "" : ", ") + c.name;
  }
  return fmt::format("hpctrain: unknown subcommand '{}' (the subcommands are: {}; see hpctrain --help)", argv[1],
                     names);
}

// Setup phase: errors are agreed across ranks, so nobody waits in a collective for a dead peer.
int run_setup_phase(Phases& phases, Context& ctx) {
  int code = 0;
  std::string message;
  try {
    if (phases.setup) phases.setup(ctx);
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
    message = e.what();
  } catch (const std::exception& e) {
    code = static_cast<int>(ExitCode::kRuntime);
    message = e.what();
  }
  return agree_on_exit(ctx.comm, code, message);
}

// Run phase: an error on one rank ends the whole job through MPI_Abort with its exit code; one
// that every rank met alike (agreed) is printed once and every rank exits with its code.
int run_run_phase(Phases& phases, Context& ctx) {
  comm::Communicator& comm = ctx.comm;
  try {
    return phases.run(ctx);
  } catch (const AgreedError& e) {
    if (comm.rank() == 0) HT_ERROR("{}", e.what());
    return static_cast<int>(e.code());
  } catch (const Error& e) {
    HT_ERROR("{}", e.what());
    if (comm.size() > 1) comm.abort(static_cast<int>(e.code()));
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    HT_ERROR("unexpected failure: {}", e.what());
    if (comm.size() > 1) comm.abort(static_cast<int>(ExitCode::kRuntime));
    return static_cast<int>(ExitCode::kRuntime);
  }
}

}  // namespace

void register_command(Command c) { registry().push_back(std::move(c)); }

int run_main(int argc, char** argv) {
  // Before MPI_Init, which fails on such a command line without a word of ours (one process: once).
  if (const std::string too_long = command_line_too_long(argc, argv); !too_long.empty()) {
    std::cerr << too_long << "\n";
    return static_cast<int>(ExitCode::kUsage);
  }
  comm::MpiSession mpi(&argc, &argv);
  auto comm = comm::make_mpi_world();
  log::init(comm->rank(), comm->size());
  Context ctx{*comm};

  CLI::App app{"hpctrain: GPT training on HPC systems (MPI, HDF5, local SGD, activation recompute)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("hpctrain ") + HPCTRAIN_VERSION);
  std::vector<std::pair<CLI::App*, Phases>> subs;
  std::vector<std::function<Phases(CLI::App&)>> configures;
  for (auto& c : registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    subs.emplace_back(sub, Phases{});
    configures.push_back(c.configure);
  }
  for (size_t i = 0; i < subs.size(); ++i) subs[i].second = configures[i](*subs[i].first);

  if (const std::string bad = unknown_subcommand(argc, argv, registry()); !bad.empty()) {
    if (comm->rank() == 0) std::cerr << bad << "\n";
    return static_cast<int>(ExitCode::kUsage);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Identical on every rank; only rank 0 prints.
    if (comm->rank() == 0) {
      const int rc = app.exit(e);
      return rc == 0 ? 0 : static_cast<int>(ExitCode::kUsage);
    }
    return e.get_exit_code() == 0 ? 0 : static_cast<int>(ExitCode::kUsage);
  }

  Phases* chosen = nullptr;
  for (auto& [sub, phases] : subs)
    if (sub->parsed()) chosen = &phases;
  if (!chosen) return static_cast<int>(ExitCode::kUsage);

  const int code = run_setup_phase(*chosen, ctx);
  return code != 0 ? code : run_run_phase(*chosen, ctx);
}

}  // namespace ht::app
