// `hpctrain inspect FILE`: describes a dataset or a checkpoint file, chosen by its root attribute
// `format`, and verifies every checksum. Exit 0 if the file verifies, 2 if it is damaged.
#include <iostream>

#include "app/commands.h"
#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/log.h"
#include "data/dataset.h"
#include "io/h5.h"

namespace ht::app {
namespace {

std::string format_of(const std::string& path) {
  auto file = io::File::open_read(path);
  HT_REQUIRE(io::has_attr(file.id(), "format"), ExitCode::kData,
             "{}: no root attribute 'format': not an hpctrain dataset or checkpoint", path);
  return io::attr_string(file.id(), "format");
}

// Returns the exit code; prints the report on stdout.
int inspect(const std::string& path) {
  const std::string format = format_of(path);
  if (format == data::kFormatName) {
    std::cout << data::describe(path);
    return 0;
  }
  HT_REQUIRE(format == checkpoint::kFormatName, ExitCode::kData, "{}: unknown format '{}' (expected '{}' or '{}')",
             path, format, data::kFormatName, checkpoint::kFormatName);
  bool ok = false;
  std::cout << checkpoint::describe(path, &ok);
  return ok ? 0 : static_cast<int>(ExitCode::kData);
}

Phases configure_inspect(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  sub.add_option("file", *path, "dataset or checkpoint file (.h5)")->required();
  Phases p;
  // Only rank 0 reads; the exit code is shared so every rank of an mpirun ends alike.
  p.run = [path](Context& ctx) -> int {
    int64_t code = 0;
    std::string error;
    if (ctx.comm.rank() == 0) {
      try {
        code = inspect(*path);
      } catch (const Error& e) {
        code = static_cast<int>(e.code());
        error = e.what();
      }
    }
    if (!error.empty()) HT_ERROR("{}", error);
    return static_cast<int>(ctx.comm.allreduce_max(code));
  };
  return p;
}

const Registrar kInspect{Command{"inspect", "describe and verify a dataset or checkpoint file", configure_inspect}};

}  // namespace
}  // namespace ht::app
