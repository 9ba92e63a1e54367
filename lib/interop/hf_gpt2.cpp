#include "interop/hf_gpt2.h"

#include <fmt/ranges.h>

#include <cstring>
#include <map>
#include <set>

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

}  // namespace ht::interop
