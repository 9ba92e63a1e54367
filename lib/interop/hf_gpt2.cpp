#include "interop/hf_gpt2.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"

namespace ht::interop {
namespace {

torch::Dtype torch_dtype(const std::string& st, const std::string& what, const std::string& name) {
  if (st == "F32") return torch::kFloat;
  if (st == "F16") return torch::kHalf;
  if (st == "BF16") return torch::kBFloat16;
  if (st == "F64") return torch::kDouble;
  HT_FAIL(ExitCode::kUsage, "{}: tensor {} has dtype {}; GPT-2 weights must be F32, F16, BF16 or F64", what, name, st);
}

torch::Tensor read_tensor(const io::SafeTensorsFile& file, const io::SafeTensorInfo& info, const std::string& what) {
  auto t = torch::empty(info.shape, torch::TensorOptions().dtype(torch_dtype(info.dtype, what, info.name)));
  std::memcpy(t.data_ptr(), file.data(info), info.bytes());  // the mapping need not be aligned
  return t.to(torch::kFloat);
}

std::string shape_text(at::IntArrayRef s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

std::vector<Gpt2Name> gpt2_names(int64_t n_layer) {
  std::vector<Gpt2Name> n = {{"wte.weight", "transformer.wte.weight"}, {"wpe.weight", "transformer.wpe.weight"}};
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string o = fmt::format("blocks.{}.", i), h = fmt::format("transformer.h.{}.", i);
    for (const char* p : {"weight", "bias"}) {
      n.push_back({o + "ln1." + p, h + "ln_1." + p});
      n.push_back({o + "ln2." + p, h + "ln_2." + p});
    }
    for (const auto& [ours, hf] : std::vector<std::pair<std::string, std::string>>{
             {"attn.qkv", "attn.c_attn"}, {"attn.proj", "attn.c_proj"}, {"mlp.fc", "mlp.c_fc"}, {"mlp.proj", "mlp.c_proj"}}) {
      n.push_back({o + ours + ".weight", h + hf + ".weight", /*transposed=*/true});
      n.push_back({o + ours + ".bias", h + hf + ".bias", false, /*bias_of_linear=*/true});
    }
  }
  n.push_back({"ln_f.weight", "transformer.ln_f.weight"});
  n.push_back({"ln_f.bias", "transformer.ln_f.bias"});
  return n;
}

std::vector<std::pair<std::string, torch::Tensor>> to_gpt2_tensors(const model::GptImpl& gpt) {
  const auto params = gpt.named_parameters();
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& n : gpt2_names(gpt.options().n_layer)) {
    torch::Tensor t;
    if (const auto* p = params.find(n.ours)) {
      t = p->detach().to(torch::kCPU, torch::kFloat);
      if (n.transposed) t = t.t();
    } else {
      // No bias in our model: the zeros transformers' Conv1D needs to compute the same.
      HT_REQUIRE(n.bias_of_linear, ExitCode::kRuntime, "model has no parameter {}", n.ours);
      const auto& w = params[n.ours.substr(0, n.ours.size() - 4) + "weight"];
      t = torch::zeros({w.size(0)}, torch::kFloat);
    }
    out.emplace_back(n.hf, t.contiguous());
  }
  return out;
}

void load_gpt2_tensors(model::GptImpl& gpt, const io::SafeTensorsFile& file, const std::string& what) {
  std::map<std::string, Gpt2Name> by_hf;
  for (auto& n : gpt2_names(gpt.options().n_layer)) by_hf[n.hf] = n;
  auto params = gpt.named_parameters();
  std::set<std::string> seen;
  torch::Tensor lm_head;
  torch::NoGradGuard no_grad;
  for (const auto& info : file.tensors()) {
    std::string name = info.name;
    if (name.rfind("transformer.", 0) != 0 && name != "lm_head.weight") name = "transformer." + name;
    const auto ends_with = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with(".attn.bias") || ends_with(".attn.masked_bias")) continue;  // causal-mask buffers
    if (name == "lm_head.weight") {
      lm_head = read_tensor(file, info, what);
      continue;
    }
    auto it = by_hf.find(name);
    HT_REQUIRE(it != by_hf.end(), ExitCode::kUsage,
               "{}: tensor {} is not a weight of a {}-layer GPT-2 (a deeper model, or not GPT-2?)", what, info.name,
               gpt.options().n_layer);
    const Gpt2Name& n = it->second;
    auto t = read_tensor(file, info, what);
    if (n.transposed) t = t.t();
    seen.insert(name);
    auto* p = params.find(n.ours);
    if (!p) {  // our model has no Linear biases: the file's must be zero to compute the same
      HT_REQUIRE(n.bias_of_linear && t.count_nonzero().item<int64_t>() == 0, ExitCode::kUsage,
                 "{}: tensor {} is not zero, but the model has no biases (model.bias = false)", what, info.name);
      continue;
    }
    HT_REQUIRE(p->sizes() == t.sizes(), ExitCode::kUsage, "{}: tensor {} has shape {}, the model's {} needs {}", what,
               info.name, shape_text(info.shape), n.ours, shape_text(n.transposed ? p->t().sizes() : p->sizes()));
    p->copy_(t);
  }
  for (const auto& [hf, n] : by_hf)
    HT_REQUIRE(seen.count(hf) || (n.bias_of_linear && !params.find(n.ours)), ExitCode::kUsage,
               "{}: tensor {} is missing", what, hf);
  if (lm_head.defined())
    HT_REQUIRE(lm_head.sizes() == gpt.wte->weight.sizes() && torch::equal(lm_head, gpt.wte->weight), ExitCode::kUsage,
               "{}: lm_head.weight differs from transformer.wte.weight; hpctrain ties the LM head to the embedding",
               what);
}

std::string gpt2_config_json(const model::GptOptions& o) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = o.vocab_size;
  j["n_positions"] = o.max_seq_len;
  j["n_embd"] = o.d_model;
  j["n_layer"] = o.n_layer;
  j["n_head"] = o.n_head;
  j["n_inner"] = 4 * o.d_model;
  j["activation_function"] = "gelu_new";  // tanh GELU, as our MLP
  j["layer_norm_epsilon"] = 1e-5;
  j["resid_pdrop"] = o.dropout;
  j["embd_pdrop"] = o.dropout;
  j["attn_pdrop"] = o.dropout;
  j["initializer_range"] = 0.02;
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["tie_word_embeddings"] = true;
  j["bos_token_id"] = 257;  // data::kEosId: separates documents, so it also starts one
  j["eos_token_id"] = 257;
  j["pad_token_id"] = 256;  // data::kPadId
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

Gpt2Config read_gpt2_config(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  HT_REQUIRE(in, ExitCode::kUsage,
             "{}: no {} (expected a Hugging Face GPT-2 directory with config.json and model.safetensors, "
             "or an hpctrain checkpoint file)",
             what, path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    HT_FAIL(ExitCode::kUsage, "{}: {} is not JSON: {}", what, path, e.what());
  }
  HT_REQUIRE(j.is_object() && j.value("model_type", std::string()) == "gpt2", ExitCode::kUsage,
             "{}: {} does not describe a GPT-2 model (model_type must be \"gpt2\")", what, path);
  Gpt2Config c;
  auto get_int = [&](const char* key, int64_t fallback) -> int64_t {
    if (!j.contains(key) || j[key].is_null()) {
      HT_REQUIRE(fallback >= 0, ExitCode::kUsage, "{}: {} lacks the field {}", what, path, key);
      return fallback;
    }
    HT_REQUIRE(j[key].is_number_integer(), ExitCode::kUsage, "{}: {}: field {} must be an integer", what, path, key);
    return j[key].get<int64_t>();
  };
  c.vocab_size = get_int("vocab_size", -1);
  c.n_positions = get_int("n_positions", -1);
  c.n_embd = get_int("n_embd", -1);
  c.n_layer = get_int("n_layer", -1);
  c.n_head = get_int("n_head", -1);
  c.n_inner = get_int("n_inner", 4 * c.n_embd);  // null means 4 * n_embd in GPT2Config
  c.activation_function = j.value("activation_function", std::string("gelu_new"));
  c.layer_norm_epsilon = j.value("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = j.value("tie_word_embeddings", true);
  c.scale_attn_weights = j.value("scale_attn_weights", true);
  c.scale_attn_by_inverse_layer_idx = j.value("scale_attn_by_inverse_layer_idx", false);
  return c;
}

void check_gpt2_config_fits(const Gpt2Config& c, const model::GptOptions& o, const std::string& what) {
  auto same = [&](const char* field, int64_t theirs, int64_t ours, const char* key) {
    HT_REQUIRE(theirs == ours, ExitCode::kUsage, "{}: {} is {} in config.json, {} in the config ({})", what, field,
               theirs, ours, key);
  };
  same("n_layer", c.n_layer, o.n_layer, "model.n_layer");
  same("n_head", c.n_head, o.n_head, "model.n_head");
  same("n_embd", c.n_embd, o.d_model, "model.d_model");
  same("vocab_size", c.vocab_size, o.vocab_size, "model.vocab_size");
  same("n_positions", c.n_positions, o.max_seq_len, "model.max_seq_len, 0 = model.seq_len");
  same("n_inner", c.n_inner, 4 * o.d_model, "hpctrain's MLP is 4 * model.d_model wide");
  HT_REQUIRE(c.activation_function == "gelu_new" || c.activation_function == "gelu_pytorch_tanh", ExitCode::kUsage,
             "{}: activation_function is {} in config.json; hpctrain's MLP uses the tanh GELU (gelu_new)", what,
             c.activation_function);
  HT_REQUIRE(c.layer_norm_epsilon == 1e-5, ExitCode::kUsage,
             "{}: layer_norm_epsilon is {} in config.json; hpctrain's LayerNorms use 1e-5", what, c.layer_norm_epsilon);
  HT_REQUIRE(c.tie_word_embeddings, ExitCode::kUsage,
             "{}: tie_word_embeddings is false in config.json; hpctrain's LM head is tied to the embedding", what);
  HT_REQUIRE(c.scale_attn_weights && !c.scale_attn_by_inverse_layer_idx, ExitCode::kUsage,
             "{}: config.json asks for an attention scaling other than 1/sqrt(head_dim) "
             "(scale_attn_weights / scale_attn_by_inverse_layer_idx)",
             what);
}

}  // namespace ht::interop
