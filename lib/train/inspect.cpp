#include "train/inspect.h"

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "model/gpt.h"
#include "train/optimizer/optimizer.h"
#include "train/train_state.h"

namespace ht::train {

std::string inspect_checkpoint(const std::string& path, bool* ok) {
  bool verified = false;
  std::string out = checkpoint::describe(path, &verified);
  *ok = verified;
  if (!verified) return out;
  // The training counters against each other: damage the checksums cannot see.
  checkpoint::Snapshot snap;
  try {
    snap = checkpoint::read_file(path);
    check_counters(snap);
    out += "counters: consistent (root step = /state/step, optimizer step counts within it)\n";
  } catch (const std::exception& e) {
    out += std::string("counters: DAMAGED: ") + e.what() + "\n";
    *ok = false;
    return out;
  }
  try {
    const config::Config cfg = config::load_text(snap.strings.at("config"), path + ":/config", {});
    torch::NoGradGuard no_grad;
    model::Gpt gpt(model::GptOptions::from_config(cfg.model));
    checkpoint::Expectation want = checkpoint::expectation_of(*gpt);
    want.optimizer = true;
    want.moments_per_rank = cfg.local_sgd.enabled;
    want.moment_names = make_optimizer(cfg.train, {})->moment_names();
    want.optimizer_name = std::string(config::name_of(cfg.train.optimizer));
    checkpoint::check_compatible(snap, want);
    out += "model: the tensors fit the model of the stored config\n";
  } catch (const std::exception& e) {
    out += std::string("model: DOES NOT FIT its stored config: ") + e.what() + "\n";
    *ok = false;
  }
  return out;
}

}  // namespace ht::train
