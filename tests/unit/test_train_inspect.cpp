// `hpctrain inspect` of a checkpoint checks its tensors against the model of its own stored config
// (the compatibility check resume and eval use): a file whose /config disagrees with its tensors
// is reported as not fitting.
#include <gtest/gtest.h>

#include <cstdlib>

#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "model/gpt.h"
#include "support/temp_dir.h"
#include "train/inspect.h"

namespace {

std::string temp_dir() { return ht::test::make_temp_dir("ht_inspect_"); }

// A checkpoint holding the tensors of a model with `tensor_layers` blocks and a config saying `config_layers`.
std::string write_checkpoint(const std::string& dir, int64_t tensor_layers, int64_t config_layers) {
  auto comm = ht::comm::make_local();
  ht::config::Config cfg;
  cfg.model.vocab_size = 40;
  cfg.model.d_model = 16;
  cfg.model.n_head = 2;
  cfg.model.seq_len = 8;
  cfg.model.n_layer = tensor_layers;
  ht::model::Gpt gpt(ht::model::GptOptions::from_config(cfg.model));
  ht::checkpoint::Snapshot s;
  for (const auto& p : gpt->named_parameters()) s.tensors["model/" + p.key()] = p.value().detach().clone();
  s.ints["step"] = 1;
  cfg.model.n_layer = config_layers;
  s.strings["config"] = ht::config::to_toml(cfg);
  s.run_id = "inspect-test";
  ht::checkpoint::Manager m(dir, 2, *comm);
  return m.save(s, 1);
}

}  // namespace

TEST(TrainInspect, ACheckpointFitsTheModelOfItsStoredConfig) {
  const std::string path = write_checkpoint(temp_dir(), 3, 3);
  bool ok = false;
  const std::string report = ht::train::inspect_checkpoint(path, &ok);
  EXPECT_TRUE(ok) << report;
  EXPECT_NE(report.find("the tensors fit the model of the stored config"), std::string::npos) << report;
}

TEST(TrainInspect, AStoredConfigThatDisagreesWithTheTensorsIsReported) {
  for (auto [tensors, config] : {std::pair<int64_t, int64_t>{4, 3}, {2, 3}}) {
    const std::string path = write_checkpoint(temp_dir(), tensors, config);
    bool ok = true;
    const std::string report = ht::train::inspect_checkpoint(path, &ok);
    EXPECT_FALSE(ok) << report;
    EXPECT_NE(report.find("DOES NOT FIT its stored config"), std::string::npos) << report;
    EXPECT_NE(report.find(tensors > config ? "that the model lacks" : "it has no parameter 'blocks.2."),
              std::string::npos)
        << report;
  }
}
