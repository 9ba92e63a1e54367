#include "interop/init_from.h"

#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "interop/hf_gpt2.h"
#include "interop/saved_model.h"
#include "io/safetensors.h"

namespace ht::interop {
namespace {

void init_from_hf_dir(model::GptImpl& gpt, const std::string& dir, const std::string& what) {
  check_gpt2_config_fits(read_gpt2_config(dir, what), gpt.options(), what);
  const std::string weights = dir + "/model.safetensors";
  struct stat st {};
  HT_REQUIRE(::stat(weights.c_str(), &st) == 0, ExitCode::kUsage,
             "{}: no {} (save the model with safetensors, e.g. save_pretrained(..., safe_serialization=True))", what,
             weights);
  load_gpt2_tensors(gpt, io::read_safetensors(weights), what);
}

void init_from_checkpoint(model::GptImpl& gpt, const std::string& path, const std::string& what) {
  checkpoint::Snapshot snap = checkpoint::read_file(path);
  auto config_it = snap.strings.find("config");
  HT_REQUIRE(config_it != snap.strings.end(), ExitCode::kData, "{}: the checkpoint holds no config", what);
  const auto theirs = model::GptOptions::from_config(config::load_text(config_it->second, path + ":/config", {}).model);
  const auto& ours = gpt.options();
  auto same = [&](const char* field, int64_t a, int64_t b) {
    HT_REQUIRE(a == b, ExitCode::kUsage, "{}: {} is {} in the checkpoint, {} in the config", what, field, a, b);
  };
  same("model.n_layer", theirs.n_layer, ours.n_layer);
  same("model.n_head", theirs.n_head, ours.n_head);
  same("model.d_model", theirs.d_model, ours.d_model);
  same("model.vocab_size", theirs.vocab_size, ours.vocab_size);
  same("model.max_seq_len (0 = model.seq_len)", theirs.max_seq_len, ours.max_seq_len);
  same("model.bias", theirs.bias, ours.bias);

  // The classification head is taken only when both models have one of the same width.
  const bool head = gpt.cls_head && theirs.num_labels == ours.num_labels;
  if (!head) {
    for (auto it = snap.tensors.begin(); it != snap.tensors.end();)
      it = it->first.rfind(checkpoint::kParamPrefix + "cls_head.", 0) == 0 ? snap.tensors.erase(it) : std::next(it);
    if (gpt.cls_head || theirs.num_labels > 0)
      HT_INFO("{}: classification head not taken ({} labels there, {} here); it keeps its random init", what,
              theirs.num_labels, ours.num_labels);
  }
  checkpoint::Expectation want = checkpoint::expectation_of(gpt);
  if (!head)
    for (auto it = want.params.begin(); it != want.params.end();)
      it = it->first.rfind("cls_head.", 0) == 0 ? want.params.erase(it) : std::next(it);
  checkpoint::check_compatible(snap, want);
  checkpoint::load_model(snap, gpt, head ? "" : "cls_head.");
}

}  // namespace

void apply_init_from(model::GptImpl& gpt, const config::Config& cfg) {
  const std::string& src = cfg.model.init_from;
  if (src.empty()) return;
  const std::string what = "model.init_from " + src;
  Stopwatch sw;
  struct stat st {};
  HT_REQUIRE(::stat(src.c_str(), &st) == 0, ExitCode::kUsage, "{}: not found", what);
  if (S_ISDIR(st.st_mode)) init_from_hf_dir(gpt, src, what);
  else init_from_checkpoint(gpt, src, what);
  HT_INFO("initial weights from {} ({}) in {:.2f}s", src, S_ISDIR(st.st_mode) ? "Hugging Face GPT-2" : "hpctrain checkpoint",
          sw.seconds());
}

}  // namespace ht::interop
