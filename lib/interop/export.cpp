#include "interop/export.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "data/hf_tokenizer.h"
#include "interop/export_target.h"
#include "interop/hf_gpt2.h"
#include "interop/saved_model.h"
#include "io/safetensors.h"

namespace ht::interop {
namespace {

// "" when path does not exist; otherwise whether it is an empty directory ("empty"), a non-empty
// one ("full") or not a directory at all ("file").
std::string output_state(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  if (!S_ISDIR(st.st_mode)) return "file";
  DIR* d = ::opendir(path.c_str());
  if (!d) return "full";
  std::string state = "empty";
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) state = "full";
  ::closedir(d);
  return state;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.flush();
  HT_REQUIRE(out, ExitCode::kData, "export: cannot write {}: {}", path, std::strerror(errno));
}

void write_tensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::vector<io::SafeTensorView> views;
  for (const auto& [name, t] : tensors)
    views.push_back({name, "F32", t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.nbytes())});
  // transformers refuses a safetensors file whose metadata does not name the framework.
  io::write_safetensors(path, views, {{"format", "pt"}});
}

void write_directory(const std::string& dir, const SavedModel& m, const data::Tokenizer& tok, ExportReport& r) {
  auto& gpt = *m.gpt;
  write_tensors(dir + "/model.safetensors", to_gpt2_tensors(gpt));
  r.files = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
  std::string config = gpt2_config_json(gpt.options());
  if (gpt.cls_head) {
    // Our classifier pools the mean of the final hidden states over real tokens;
    // GPT2ForSequenceClassification takes the last non-pad token instead, so the head is its own
    // file with its pooling written down, not a `score` layer transformers would misuse.
    write_tensors(dir + "/classification_head.safetensors",
                  {{"score.weight", gpt.cls_head->weight.detach().contiguous()},
                   {"score.bias", gpt.cls_head->bias.detach().contiguous()}});
    r.files.push_back("classification_head.safetensors");
    auto j = nlohmann::ordered_json::parse(config);
    j["num_labels"] = gpt.options().num_labels;
    j["hpctrain_classification_head"] = {
        {"file", "classification_head.safetensors"},
        {"pooling", "mean of the final hidden states (after ln_f) over the non-pad tokens"},
        {"logits", "pooled @ score.weight.T + score.bias"}};
    config = j.dump(2) + "\n";
  }
  write_text(dir + "/config.json", config);
  write_text(dir + "/tokenizer.json", data::to_hf_tokenizer_json(tok));
  write_text(dir + "/tokenizer_config.json", data::to_hf_tokenizer_config_json(gpt.options().max_seq_len));
}

}  // namespace

ExportReport export_hf(const ExportOptions& o) {
  HT_REQUIRE(!o.output_dir.empty(), ExitCode::kUsage, "export: --output must not be empty");
  std::string out = o.output_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const std::string state = output_state(out);
  HT_REQUIRE(state != "file", ExitCode::kUsage, "export: --output {} exists and is not a directory", out);
  HT_REQUIRE(state != "full" || o.force, ExitCode::kUsage,
             "export: --output {} exists and is not empty; pass --force to replace it", out);
  if (state == "full") require_replaceable_output(out, o.checkpoint);

  SavedModel m = load_saved_model(o.checkpoint);
  const data::Tokenizer tok = saved_tokenizer(m, o.data_path);
  ExportReport r;
  r.parameters = m.gpt->num_parameters();
  r.step = m.step;

  const std::string parent = fs::parent_dir(out).empty() ? "." : fs::parent_dir(out);
  fs::make_dirs(parent);
  const std::string tmp = make_temp_dir_beside(out);
  try {
    write_directory(tmp, m, tok, r);
    std::string old;
    if (!state.empty()) {  // move the old directory aside first: rename cannot replace a non-empty one
      old = out + ".old" + tmp.substr(out.size() + 4);
      HT_REQUIRE(::rename(out.c_str(), old.c_str()) == 0, ExitCode::kData, "export: cannot replace {}: {}", out,
                 std::strerror(errno));
    }
    if (::rename(tmp.c_str(), out.c_str()) != 0) {
      const int err = errno;
      if (!old.empty()) ::rename(old.c_str(), out.c_str());
      HT_FAIL(ExitCode::kData, "export: cannot rename {} to {}: {}", tmp, out, std::strerror(err));
    }
    if (!old.empty()) fs::remove_tree(old);
  } catch (...) {
    fs::remove_tree(tmp);
    throw;
  }
  return r;
}

}  // namespace ht::interop
