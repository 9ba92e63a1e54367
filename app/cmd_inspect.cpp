// `hpctrain inspect FILE`: describes a dataset or a checkpoint file, chosen by its root attribute
// `format`, and verifies every checksum (and, for a checkpoint, that its tensors fit the model of
// its stored config). Exit 0 if the file verifies, 2 if it is damaged.
#include <iostream>

#include "app/commands.h"
#include "checkpoint/checkpoint.h"
#include "comm/agree.h"
#include "core/error.h"
#include "core/log.h"
#include "data/dataset.h"
#include "train/inspect.h"

namespace ht::app {
namespace {

// Returns the exit code; prints the report on stdout.
int inspect(const std::string& path) {
  if (data::is_dataset_file(path)) {
    std::cout << data::describe(*data::Dataset::open(path));
    return 0;
  }
  HT_REQUIRE(checkpoint::is_checkpoint_file(path), ExitCode::kData,
             "{}: not an hpctrain dataset or checkpoint (root attribute 'format' is neither '{}' nor '{}')", path,
             data::kFormatName, checkpoint::kFormatName);
  bool ok = false;
  std::cout << train::inspect_checkpoint(path, &ok);
  return ok ? 0 : static_cast<int>(ExitCode::kData);
}

Phases configure_inspect(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  sub.add_option("file", *path, "dataset or checkpoint file (.h5)")->required();
  Phases p;
  // Only rank 0 reads; a failure and the exit code reach every rank, so an mpirun ends alike.
  p.run = [path](Context& ctx) -> int {
    int64_t code = 0;
    comm::run_agreed(ctx.comm, [&] {
      if (ctx.comm.rank() == 0) code = inspect(*path);
    });
    return static_cast<int>(ctx.comm.allreduce_max(code));
  };
  return p;
}

const Registrar kInspect{Command{"inspect", "describe and verify a dataset or checkpoint file", configure_inspect}};

}  // namespace
}  // namespace ht::app
