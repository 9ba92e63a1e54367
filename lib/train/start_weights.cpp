#include "train/start_weights.h"

#include "checkpoint/checkpoint.h"
#include "comm/agree.h"
#include "core/log.h"
#include "interop/init_from.h"

namespace ht::train {

void load_start_weights(model::GptImpl& gpt, const config::Config& cfg, const ResumeRequest& resume,
                        comm::Communicator& comm) {
  if (cfg.model.init_from.empty()) return;
  const bool resumes =
      !resume.from_file.empty() || (resume.latest && !checkpoint::list_checkpoints(cfg.checkpoint_dir()).empty());
  if (resumes) {
    HT_INFO("model.init_from {} not used: the run resumes from a checkpoint", cfg.model.init_from);
    return;
  }
  comm::run_agreed(comm, [&] { interop::apply_init_from(gpt, cfg); });
}

}  // namespace ht::train
