#include <mpi.h>

#include <iostream>
#include <vector>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace ht::app {
namespace {

std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

// Every rank reaches this point; the worst exit code wins, and only failing ranks print.
int agree_on_exit(comm::Communicator& comm, int local_code, const std::string& message) {
  if (local_code != 0) HT_ERROR("{}", message);
  int64_t code = comm.allreduce_max(static_cast<int64_t>(local_code));
  return static_cast<int>(code);
}

}  // namespace

void register_command(Command c) { registry().push_back(std::move(c)); }

int run_main(int argc, char** argv) {
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

  // Setup phase: errors are agreed across ranks, so nobody waits in a collective for a dead peer.
  int code = 0;
  std::string message;
  try {
    if (chosen->setup) chosen->setup(ctx);
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
    message = e.what();
  } catch (const std::exception& e) {
    code = static_cast<int>(ExitCode::kRuntime);
    message = e.what();
  }
  code = agree_on_exit(*comm, code, message);
  if (code != 0) return code;

  // Run phase: an error on one rank ends the whole job through MPI_Abort with its exit code.
  try {
    return chosen->run(ctx);
  } catch (const Error& e) {
    HT_ERROR("{}", e.what());
    if (comm->size() > 1) comm->abort(static_cast<int>(e.code()));
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    HT_ERROR("unexpected failure: {}", e.what());
    if (comm->size() > 1) comm->abort(static_cast<int>(ExitCode::kRuntime));
    return static_cast<int>(ExitCode::kRuntime);
  }
}

}  // namespace ht::app
