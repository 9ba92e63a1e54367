#include "train/report/plot.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "train/report/gnuplot.h"

namespace ht::train {
namespace {

struct RunCurves {
  std::string label;
  std::string train, eval, epochs;  // data file paths (step tokens value ...)
  bool classification = false;
};

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// gnuplot single-quoted string: a quote is doubled.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A field of a metrics line that is there with another type than a number (e.g. "loss": null,
// which is how JSON writes a NaN loss): the line is skipped, not the whole plot.
struct WrongField {
  std::string text;  // field "loss" is null (null), expected a number
};

double number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) throw WrongField{fmt::format("field \"{}\" is missing", key)};
  const auto& v = *it;
  if (v.is_number()) return v.get<double>();
  std::string shown = v.dump();
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  const std::string type = v.type_name();  // "string", "boolean", "null", "array", "object"
  throw WrongField{fmt::format("field \"{}\" is {}{} ({}), expected a number", key,
                               type == "null" ? "" : type[0] == 'a' || type[0] == 'o' ? "an " : "a ", type, shown)};
}

// One metrics line as the columns below: false when it is no metrics object (a torn last line).
// Throws WrongField before anything is written, so a bad line leaves no half row.
bool extract_line(const std::string& line, RunCurves& c, std::ofstream& train, std::ofstream& eval,
                  std::ofstream& epochs, double& tokens_per_step, int64_t& train_lines) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step")) return false;
  const double step = number(j, "step");
  if (j.contains("loss") && j.contains("tokens_seen")) {
    const double tokens = number(j, "tokens_seen"), loss = number(j, "loss");
    if (step > 0) tokens_per_step = tokens / step;
    train << step << ' ' << tokens << ' ' << loss << '\n';
    ++train_lines;
  }
  if (j.contains("eval_loss")) {
    const double eval_loss = number(j, "eval_loss");
    const bool cls = j.contains("eval_f1");
    const double f1 = cls ? number(j, "eval_f1") : 0.0, accuracy = cls ? number(j, "eval_accuracy") : 0.0;
    const double epoch = cls && j.contains("epoch") ? number(j, "epoch") : 0.0;
    // Evaluation lines carry no token count; every step consumes the same global batch.
    eval << step << ' ' << step * tokens_per_step << ' ' << eval_loss << '\n';
    if (cls) {
      c.classification = true;
      epochs << epoch << ' ' << accuracy << ' ' << f1 << '\n';
    }
  }
  return true;
}

// Splits metrics.jsonl into whitespace-separated columns gnuplot reads: train "step tokens loss",
// eval "step tokens eval_loss", per-epoch "epoch accuracy f1" (classification). A torn line is
// skipped silently (a crashed run's last line); a line with a field of the wrong type is skipped
// with one warning per file naming file:line and the field.
RunCurves extract(const std::string& run_dir, const std::string& metrics_file, const std::string& tmp, int index) {
  const std::string src = run_dir + "/" + metrics_file;
  std::ifstream in(src);
  HT_REQUIRE(in.good(), ExitCode::kData, "{}: cannot read (no metrics of a run here)", src);
  RunCurves c;
  c.label = base_name(run_dir);
  c.train = fmt::format("{}/train{}.dat", tmp, index);
  c.eval = fmt::format("{}/eval{}.dat", tmp, index);
  c.epochs = fmt::format("{}/epochs{}.dat", tmp, index);
  std::ofstream train(c.train), eval(c.eval), epochs(c.epochs);
  double tokens_per_step = 0.0;
  int64_t train_lines = 0, line_no = 0, skipped = 0;
  std::string first_fault;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    try {
      extract_line(line, c, train, eval, epochs, tokens_per_step, train_lines);
    } catch (const WrongField& f) {
      if (skipped++ == 0) first_fault = fmt::format("{}:{}: {}", src, line_no, f.text);
    }
  }
  if (skipped > 0)
    HT_WARN("plot: {}; line skipped{}", first_fault,
            skipped > 1 ? fmt::format(" (and {} more such lines)", skipped - 1) : std::string());
  HT_REQUIRE(train_lines > 0, ExitCode::kData, "{}: no training line to plot", src);
  return c;
}

std::string loss_script(const std::vector<RunCurves>& runs, const std::string& png) {
  std::string s = fmt::format(
      "set terminal pngcairo size 1400,540 noenhanced\nset output {}\nset grid\nset key top right\n"
      "set ylabel 'loss (nats)'\nset multiplot layout 1,2\n",
      quoted(png));
  for (const char* x : {"1", "2"}) {
    s += fmt::format("set xlabel '{}'\nplot ", std::string(x) == "1" ? "optimizer step" : "tokens seen");
    std::string parts;
    for (const auto& r : runs) {
      parts += fmt::format("{} using {}:3 with lines title {}, ", quoted(r.train), x, quoted(r.label + " train"));
      std::ifstream probe(r.eval);
      if (probe.peek() != std::ifstream::traits_type::eof())
        parts += fmt::format("{} using {}:3 with linespoints title {}, ", quoted(r.eval), x, quoted(r.label + " eval"));
    }
    s += parts.substr(0, parts.size() - 2) + "\n";
  }
  return s + "unset multiplot\n";
}

std::string accuracy_script(const std::vector<RunCurves>& runs, const std::string& png) {
  std::string s = fmt::format(
      "set terminal pngcairo size 900,540 noenhanced\nset output {}\nset grid\nset key bottom right\n"
      "set xlabel 'epoch'\nset ylabel 'validation score'\nset yrange [0:1]\nplot ",
      quoted(png));
  std::string parts;
  for (const auto& r : runs) {
    if (!r.classification) continue;
    parts += fmt::format("{} using 1:2 with linespoints title {}, ", quoted(r.epochs), quoted(r.label + " accuracy"));
    parts += fmt::format("{} using 1:3 with linespoints title {}, ", quoted(r.epochs), quoted(r.label + " macro-F1"));
  }
  return s + parts.substr(0, parts.size() - 2) + "\n";
}

}  // namespace

std::vector<std::string> plot_runs(const PlotOptions& opts) {
  HT_REQUIRE(!opts.run_dirs.empty(), ExitCode::kUsage, "plot: no run directory given");
  const std::string gnuplot = find_gnuplot();
  if (gnuplot.empty()) {
    HT_INFO("plot: gnuplot not found in PATH; no loss.png drawn (install gnuplot-nox)");
    return {};
  }
  // Here, not inside gnuplot: its "cannot open file" would name neither the option nor the cause.
  fs::ensure_writable_dir(opts.output_dir, "plot: --output");
  char tmpl[] = "/tmp/hpctrain-plot-XXXXXX";
  HT_REQUIRE(::mkdtemp(tmpl) != nullptr, ExitCode::kData, "plot: cannot create a temporary directory: {}",
             std::strerror(errno));
  const std::string tmp = tmpl;
  std::vector<std::string> written, scratch;
  auto cleanup = [&] {
    for (const auto& f : scratch) ::unlink(f.c_str());
    ::rmdir(tmp.c_str());
  };
  try {
    std::vector<RunCurves> runs;
    bool classification = false;
    for (size_t i = 0; i < opts.run_dirs.size(); ++i) {
      runs.push_back(extract(opts.run_dirs[i], opts.metrics_file, tmp, static_cast<int>(i)));
      scratch.insert(scratch.end(), {runs.back().train, runs.back().eval, runs.back().epochs});
      classification = classification || runs.back().classification;
    }
    auto draw = [&](const std::string& name, const std::string& text) {
      const std::string script = tmp + "/" + name + ".gp", png = opts.output_dir + "/" + name + ".png";
      std::ofstream(script) << text;
      scratch.push_back(script);
      run_gnuplot(gnuplot, script, png, opts.timeout_s);
      written.push_back(png);
    };
    draw("loss", loss_script(runs, opts.output_dir + "/loss.png"));
    if (classification) draw("accuracy", accuracy_script(runs, opts.output_dir + "/accuracy.png"));
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return written;
}

void plot_finished_run(const std::string& output_dir, const std::string& metrics_file) {
  try {
    PlotOptions opts;
    opts.run_dirs = {output_dir};
    opts.output_dir = output_dir;
    opts.metrics_file = metrics_file;
    for (const auto& png : plot_runs(opts)) HT_INFO("plot: {}", png);
  } catch (const std::exception& e) {
    HT_WARN("no plot drawn: {}", e.what());
  }
}

}  // namespace ht::train
