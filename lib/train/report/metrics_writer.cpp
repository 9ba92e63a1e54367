#include "train/report/metrics_writer.h"

#include <unistd.h>

#include <cstdio>

#include "core/error.h"
#include "core/log.h"

namespace ht::train {
namespace {

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  std::string h = host;
  for (char& c : h)
    if (c == '/') c = '_';
  return h;
}

// Depth-first over objects: numbers become scalars, strings and arrays are not TensorBoard scalars.
void add_scalars(TensorBoardWriter& tb, const nlohmann::json& j, const std::string& prefix, int64_t step) {
  for (const auto& [key, value] : j.items()) {
    const std::string tag = prefix.empty() ? key : prefix + "/" + key;
    if (value.is_object()) add_scalars(tb, value, tag, step);
    else if (value.is_number() && tag != "step") tb.scalar(tag, value.get<double>(), step);
  }
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool enabled, const std::string& tensorboard_dir)
    : enabled_(enabled) {
  if (!enabled_) return;
  out_.open(path, std::ios::app);
  HT_REQUIRE(out_.good(), ExitCode::kData, "{}: cannot open metrics file for writing", path);
  if (!tensorboard_dir.empty()) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir, host_name());
    HT_INFO("TensorBoard events: {}", tensorboard_->path());
  }
}

void MetricsWriter::write(const nlohmann::json& line) {
  if (!enabled_) return;
  out_ << line.dump() << '\n';
  out_.flush();
  if (tensorboard_) {
    add_scalars(*tensorboard_, line, "", line.value("step", int64_t{0}));
    tensorboard_->flush();
  }
}

void MetricsWriter::text(const std::string& tag, const std::string& text, int64_t step) {
  if (!enabled_ || !tensorboard_) return;
  tensorboard_->text(tag, text, step);
  tensorboard_->flush();
}

void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  HT_REQUIRE(out.good(), ExitCode::kData, "{}: cannot write", tmp);
  int64_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || (j.contains("step") && j["step"].is_number() && j["step"] > step)) {
      ++dropped;
      continue;
    }
    out << line << '\n';
  }
  out.close();
  HT_REQUIRE(out.good() && std::rename(tmp.c_str(), path.c_str()) == 0, ExitCode::kData,
             "{}: cannot replace it with the lines up to step {}", path, step);
  if (dropped > 0) HT_INFO("{}: dropped {} line(s) after step {} (redone by this run)", path, dropped, step);
}

}  // namespace ht::train
