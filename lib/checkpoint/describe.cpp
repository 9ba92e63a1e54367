// Human-readable checkpoint report (`hpctrain inspect`) and the checkpoint/model compatibility check.
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "core/error.h"

namespace ht::checkpoint {
namespace {

std::string shape_text(const torch::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

std::string dtype_text(const torch::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

double l2_norm(const torch::Tensor& t) {
  if (t.numel() == 0) return 0.0;
  return t.to(torch::kFloat64).norm().item<double>();
}

void describe_parameters(std::ostringstream& out, const detail::TensorMap& tensors) {
  int64_t count = 0, elems = 0;
  size_t width = 10;
  for (const auto& [k, t] : tensors)
    if (k.rfind(kParamPrefix, 0) == 0) width = std::max(width, k.size() - kParamPrefix.size());
  out << fmt::format("\nparameters (/model):\n  {:<{}}  {:<16} {:<9} {:>12}\n", "name", width, "shape", "dtype",
                     "L2 norm");
  for (const auto& [k, t] : tensors) {
    if (k.rfind(kParamPrefix, 0) != 0) continue;
    out << fmt::format("  {:<{}}  {:<16} {:<9} {:>12.6g}\n", k.substr(kParamPrefix.size()), width, shape_text(t), dtype_text(t),
                       l2_norm(t));
    ++count;
    elems += t.numel();
  }
  out << fmt::format("  {} parameter tensors, {} elements\n", count, elems);
}

// Tensors grouped by their first path component, with up to 3 examples each.
void describe_groups(std::ostringstream& out, const std::string& indent, const detail::TensorMap& tensors,
                     bool skip_model) {
  std::map<std::string, std::vector<const std::pair<const std::string, torch::Tensor>*>> groups;
  for (const auto& kv : tensors) {
    if (skip_model && kv.first.rfind(kParamPrefix, 0) == 0) continue;
    groups[kv.first.substr(0, kv.first.find('/'))].push_back(&kv);
  }
  for (const auto& [g, items] : groups) {
    int64_t elems = 0;
    for (const auto* kv : items) elems += kv->second.numel();
    out << fmt::format("{}{}/: {} tensors, {} elements\n", indent, g, items.size(), elems);
    for (size_t i = 0; i < items.size() && i < 3; ++i)
      out << fmt::format("{}  {} {} {}\n", indent, items[i]->first, shape_text(items[i]->second),
                         dtype_text(items[i]->second));
    if (items.size() > 3) out << fmt::format("{}  ...\n", indent);
  }
}

void describe_contents(std::ostringstream& out, const detail::FileContents& c) {
  const auto& p = c.provenance;
  auto get = [&](const char* k) { auto it = p.find(k); return it == p.end() ? std::string("?") : it->second; };
  const std::string seconds = get("train_seconds");  // "?" in files written before the attribute
  out << fmt::format("format {} v{}, hpctrain {}, libtorch {}, written {} by {} rank(s)\nstep {}{}\n", get("format"),
                     get("format_version"), get("hpctrain_version"), get("torch_version"), get("time"),
                     get("world_size"), get("step"), seconds == "?" ? "" : ", " + seconds + " training seconds");
  out << "\nstate (/state):\n";
  for (const auto& [k, v] : c.shared.ints) out << fmt::format("  {} = {}\n", k, v);
  for (const auto& [k, v] : c.shared.reals) out << fmt::format("  {} = {:.17g}\n", k, v);
  describe_parameters(out, c.shared.tensors);
  out << "\nother tensors:\n";
  describe_groups(out, "  ", c.shared.tensors, true);
  out << "\nper-rank entries (/rank/<r>):\n";
  for (size_t r = 0; r < c.per_rank.size(); ++r) {
    out << fmt::format("  rank {}:\n", r);
    describe_groups(out, "    ", c.per_rank[r], false);
  }
  for (const auto& [k, v] : c.shared.strings) {
    out << fmt::format("\n{} (/{}, {} bytes):\n", k, k, v.size());
    std::istringstream lines(v);
    for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
  }
}

}  // namespace

std::string describe(const std::string& path, bool* ok) {
  const detail::Scan s = detail::scan_file(path, false);
  std::ostringstream out;
  out << "checkpoint " << path << "\n";
  describe_contents(out, s.contents);
  if (s.faults.empty()) {
    out << fmt::format("\nchecksums: OK ({} datasets read, {} bytes, Fletcher32 verified)\n", s.datasets, s.bytes);
  } else {
    out << fmt::format("\nchecksums: DAMAGED ({} fault(s); {} datasets read fine)\n", s.faults.size(), s.datasets);
    for (const auto& f : s.faults) out << "  " << f << "\n";
  }
  if (ok) *ok = s.faults.empty();
  return out.str();
}

namespace {

// Both directions for one group ("model/" or "model_buffers/") of the file against the model's tensors.
void check_group(const Snapshot& file, const std::string& prefix, const std::map<std::string, torch::Tensor>& want,
                 const char* what) {
  for (const auto& [name, t] : want) {
    auto it = file.tensors.find(prefix + name);
    HT_REQUIRE(it != file.tensors.end(), ExitCode::kUsage,
               "checkpoint {} does not fit the model: it has no {} '{}' (different model config?)", file.path, what,
               name);
    HT_REQUIRE(it->second.sizes() == t.sizes(), ExitCode::kUsage,
               "checkpoint {} does not fit the model: {} '{}' has shape {} in the checkpoint but {} in the model",
               file.path, what, name, shape_text(it->second), shape_text(t));
    HT_REQUIRE(it->second.scalar_type() == t.scalar_type(), ExitCode::kUsage,
               "checkpoint {} does not fit the model: {} '{}' is {} in the checkpoint but {} in the model", file.path,
               what, name, dtype_text(it->second), dtype_text(t));
  }
  for (const auto& [key, t] : file.tensors) {
    if (key.rfind(prefix, 0) != 0) continue;
    HT_REQUIRE(want.count(key.substr(prefix.size())), ExitCode::kUsage,
               "checkpoint {} does not fit the model: it has {} '{}' that the model lacks (the checkpoint's model is "
               "larger or different; check model.n_layer and the other model.* keys)",
               file.path, what, key.substr(prefix.size()));
  }
}

bool has_moments(const detail::TensorMap& m) {
  return std::any_of(m.begin(), m.end(), [](const auto& kv) { return kv.first.rfind(kOptimizerPrefix, 0) == 0; });
}

void check_moments(const Snapshot& file, const detail::TensorMap& moments, const Expectation& want) {
  const size_t skip = kOptimizerPrefix.size();
  for (const auto& [key, t] : moments) {
    if (key.rfind(kOptimizerPrefix, 0) != 0) continue;
    const auto slash = key.find('/', skip);
    HT_REQUIRE(slash != std::string::npos, ExitCode::kData, "checkpoint {}: malformed optimizer entry '{}'", file.path,
               key);
    const std::string kind = key.substr(skip, slash - skip), name = key.substr(slash + 1);
    auto p = want.params.find(name);
    HT_REQUIRE(p != want.params.end(), ExitCode::kUsage,
               "checkpoint {} does not fit the model: optimizer state '{}' belongs to no parameter of the model",
               file.path, key);
    if (kind == "step") {
      HT_REQUIRE(t.numel() == 1, ExitCode::kData, "checkpoint {}: '{}' must hold one step count, has {} values",
                 file.path, key, t.numel());
      continue;
    }
    HT_REQUIRE(std::find(want.moment_names.begin(), want.moment_names.end(), kind) != want.moment_names.end(),
               ExitCode::kUsage,
               "config key 'train.optimizer': checkpoint {} holds the optimizer state '{}', which train.optimizer = {} "
               "does not keep (it keeps {}): the checkpoint was trained with another optimizer; set train.optimizer "
               "to the one in the checkpoint's /config",
               file.path, kind, want.optimizer_name, fmt::join(want.moment_names, ", "));
    HT_REQUIRE(t.sizes() == p->second.sizes(), ExitCode::kUsage,
               "checkpoint {} does not fit the model: '{}' has shape {} but parameter '{}' has {}", file.path, key,
               shape_text(t), name, shape_text(p->second));
  }
}

}  // namespace

Expectation expectation_of(const torch::nn::Module& module) {
  Expectation want;
  for (const auto& p : module.named_parameters()) want.params[p.key()] = p.value();
  for (const auto& b : module.named_buffers()) want.buffers[b.key()] = b.value();
  return want;
}

void load_model(const Snapshot& snap, torch::nn::Module& module, const std::string& skip_prefix) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) {
    if (!skip_prefix.empty() && p.key().rfind(skip_prefix, 0) == 0) continue;
    auto it = snap.tensors.find(kParamPrefix + p.key());
    HT_REQUIRE(it != snap.tensors.end(), ExitCode::kUsage, "checkpoint {} has no parameter '{}'", snap.path, p.key());
    p.value().copy_(it->second);
  }
  for (auto& b : module.named_buffers()) {
    auto it = snap.tensors.find(kBufferPrefix + b.key());
    if (it != snap.tensors.end()) b.value().copy_(it->second);
  }
}

void check_compatible(const Snapshot& file, const Expectation& want) {
  check_group(file, kParamPrefix, want.params, "parameter");
  check_group(file, kBufferPrefix, want.buffers, "buffer");
  if (!want.optimizer) return;
  const bool per_rank = has_moments(file.per_rank);
  HT_REQUIRE(!per_rank || want.moments_per_rank, ExitCode::kUsage,
             "checkpoint {} keeps the optimizer moments per rank (written with local SGD), but this run averages "
             "gradients every step and would let replicas that start from different moments drift apart; resume "
             "with local_sgd.enabled = true",
             file.path);
  check_moments(file, per_rank ? file.per_rank : file.tensors, want);
}

}  // namespace ht::checkpoint
