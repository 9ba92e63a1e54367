#include "interop/saved_model.h"

#include "core/error.h"
#include "config/path_list.h"
#include "data/dataset.h"

namespace ht::interop {

SavedModel load_saved_model(const std::string& checkpoint_path) {
  SavedModel m;
  m.path = checkpoint_path;
  const checkpoint::Snapshot snap = checkpoint::read_file(checkpoint_path);
  auto config_it = snap.strings.find("config");
  HT_REQUIRE(config_it != snap.strings.end(), ExitCode::kData, "{}: the checkpoint holds no config", checkpoint_path);
  m.cfg = config::load_text(config_it->second, checkpoint_path + ":/config", {});
  m.gpt = model::Gpt(model::GptOptions::from_config(m.cfg.model));
  checkpoint::check_compatible(snap, checkpoint::expectation_of(*m.gpt));
  checkpoint::load_model(snap, *m.gpt);
  m.gpt->eval();
  m.step = snap.step;
  if (auto it = snap.strings.find("dataset_identity"); it != snap.strings.end()) m.dataset_identity = it->second;
  return m;
}

data::Tokenizer saved_tokenizer(const SavedModel& m, const std::string& data_path) {
  config::DataConfig where = m.cfg.data;
  if (!data_path.empty()) where.paths = config::split_path_list("--data", data_path);
  HT_REQUIRE(!where.paths.empty(), ExitCode::kUsage, "{}: its config names no data.path; pass --data FILE", m.path);
  const auto data = data::open(where, data_path.empty() ? m.path + ":/config data.path" : "--data");
  HT_REQUIRE(m.dataset_identity.empty() || data->identity() == m.dataset_identity, ExitCode::kData,
             "{}: holds other data than checkpoint {} was trained on (dataset identity {} vs {}), so its tokenizer "
             "may encode differently; pass --data with the original dataset file(s)",
             data->path(), m.path, data->identity(), m.dataset_identity);
  return data->tokenizer();
}

}  // namespace ht::interop
