#include "interop/saved_model.h"

#include "core/error.h"
#include "data/dataset.h"

namespace ht::interop {

void copy_model_tensors(const checkpoint::Snapshot& snap, model::GptImpl& gpt, const std::string& skip_prefix) {
  torch::NoGradGuard no_grad;
  for (auto& p : gpt.named_parameters()) {
    if (!skip_prefix.empty() && p.key().rfind(skip_prefix, 0) == 0) continue;
    p.value().copy_(snap.tensors.at("model/" + p.key()));
  }
  for (auto& b : gpt.named_buffers()) {
    auto it = snap.tensors.find("model_buffers/" + b.key());
    if (it != snap.tensors.end()) b.value().copy_(it->second);
  }
}

SavedModel load_saved_model(const std::string& checkpoint_path) {
  SavedModel m;
  m.path = checkpoint_path;
  const checkpoint::Snapshot snap = checkpoint::read_file(checkpoint_path);
  auto config_it = snap.strings.find("config");
  HT_REQUIRE(config_it != snap.strings.end(), ExitCode::kData, "{}: the checkpoint holds no config", checkpoint_path);
  m.cfg = config::load_text(config_it->second, checkpoint_path + ":/config", {});
  m.gpt = model::Gpt(model::GptOptions::from_config(m.cfg.model));
  checkpoint::Expectation want;
  for (const auto& p : m.gpt->named_parameters()) want.params[p.key()] = p.value();
  for (const auto& b : m.gpt->named_buffers()) want.buffers[b.key()] = b.value();
  checkpoint::check_compatible(snap, want);
  copy_model_tensors(snap, *m.gpt);
  m.gpt->eval();
  m.step = snap.step;
  if (auto it = snap.strings.find("dataset_identity"); it != snap.strings.end()) m.dataset_identity = it->second;
  return m;
}

data::Tokenizer saved_tokenizer(const SavedModel& m, const std::string& data_path) {
  const std::string path = data_path.empty() ? m.cfg.data.path : data_path;
  HT_REQUIRE(!path.empty(), ExitCode::kUsage, "{}: its config names no data.path; pass --data FILE", m.path);
  const auto data = data::Dataset::open(path);
  HT_REQUIRE(m.dataset_identity.empty() || data->identity() == m.dataset_identity, ExitCode::kData,
             "{}: holds other data than checkpoint {} was trained on (dataset identity {} vs {}), so its tokenizer "
             "may encode differently; pass --data with the original dataset file",
             path, m.path, data->identity(), m.dataset_identity);
  return data->tokenizer();
}

}  // namespace ht::interop
