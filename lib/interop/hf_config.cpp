// config.json of a Hugging Face GPT-2 directory: written by `export` (gpt2_config_json), read and
// checked against the model by `model.init_from` (read_gpt2_config, check_gpt2_config_fits).
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "interop/hf_gpt2.h"

namespace ht::interop {
namespace {

// The fields of a parsed config.json, each read as the one JSON type GPT2Config gives it. A field
// of another type (a hand-edited "n_embd": "768") is a malformed file: refused (kData) naming the
// file, the field, the type found and the type expected, where nlohmann would throw a bare
// type_error naming neither.
struct ConfigFields {
  const nlohmann::json& j;
  const std::string& what;
  const std::string& path;

  // The value, or nullptr when the field is absent or null (GPT2Config's "use the default").
  const nlohmann::json* find(const char* key) const {
    const auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void wrong_type(const char* key, const nlohmann::json& v, const char* expected) const {
    std::string shown = v.dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    const std::string type = v.type_name();  // "string", "number", "boolean", "array", "object"
    HT_FAIL(ExitCode::kData, "{}: {}: field \"{}\" is {} {} ({}), expected {}", what, path, key,
            type[0] == 'a' || type[0] == 'o' ? "an" : "a", type, shown, expected);
  }
  // A required field (no fallback) that is absent is a malformed file too.
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const nlohmann::json* v = find(key);
    if (!v) {
      HT_REQUIRE(fallback.has_value(), ExitCode::kData, "{}: {} lacks the field \"{}\"", what, path, key);
      return *fallback;
    }
    if (!v->is_number_integer()) wrong_type(key, *v, "an integer");
    return v->get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    const nlohmann::json* v = find(key);
    if (v && !v->is_number()) wrong_type(key, *v, "a number");
    return v ? v->get<double>() : fallback;
  }
  bool boolean(const char* key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (v && !v->is_boolean()) wrong_type(key, *v, "true or false");
    return v ? v->get<bool>() : fallback;
  }
  std::string text(const char* key, const std::string& fallback) const {
    const nlohmann::json* v = find(key);
    if (v && !v->is_string()) wrong_type(key, *v, "a string");
    return v ? v->get<std::string>() : fallback;
  }
};

}  // namespace

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
    HT_FAIL(ExitCode::kData, "{}: {} is not JSON: {}", what, path, e.what());
  }
  HT_REQUIRE(j.is_object(), ExitCode::kData, "{}: {} is a JSON {}, expected an object", what, path, j.type_name());
  const ConfigFields f{j, what, path};
  HT_REQUIRE(f.text("model_type", "") == "gpt2", ExitCode::kUsage,
             "{}: {} does not describe a GPT-2 model (model_type must be \"gpt2\")", what, path);
  Gpt2Config c;
  c.vocab_size = f.integer("vocab_size");
  c.n_positions = f.integer("n_positions");
  c.n_embd = f.integer("n_embd");
  c.n_layer = f.integer("n_layer");
  c.n_head = f.integer("n_head");
  c.n_inner = f.integer("n_inner", 4 * c.n_embd);  // null means 4 * n_embd in GPT2Config
  c.activation_function = f.text("activation_function", "gelu_new");
  c.layer_norm_epsilon = f.number("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  c.scale_attn_weights = f.boolean("scale_attn_weights", true);
  c.scale_attn_by_inverse_layer_idx = f.boolean("scale_attn_by_inverse_layer_idx", false);
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
