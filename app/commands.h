// Subcommand registry of the hpctrain executable. Each app/cmd_*.cpp registers one subcommand
// with a static Registrar; run_main parses the command line, sets up MPI and logging, runs the
// chosen command and turns errors into exit codes, making sure no rank is left hanging.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace ht::app {

struct Context {
  comm::Communicator& comm;
};

// Two phases: setup (parsing, config, opening files: errors agreed across ranks, clean exit)
// and run (collective work: an error on any rank aborts the whole job).
struct Phases {
  std::function<void(Context&)> setup;
  std::function<int(Context&)> run;
};

struct Command {
  std::string name;
  std::string description;
  // Adds options to the subcommand and returns how to run it once parsed.
  std::function<Phases(CLI::App& sub)> configure;
};

void register_command(Command c);

struct Registrar {
  explicit Registrar(Command c) { register_command(std::move(c)); }
};

int run_main(int argc, char** argv);

}  // namespace ht::app
