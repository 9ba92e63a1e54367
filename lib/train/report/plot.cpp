#include "train/report/plot.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "config/config.h"
#include "core/log.h"
#include "train/report/gnuplot.h"

namespace ht::train {
namespace {

struct RunCurves {
  std::string label;
  std::string train, eval, epochs;  // data file paths (step tokens seconds value ...)
  bool classification = false;
  double max_tokens = 0.0;
  int ranks = 0;  // from the step lines; 0 when the metrics predate the field
};

std::vector<std::string> path_parts(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : path + "/") {
    if (c != '/') {
      part += c;
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
      part.clear();
    }
  }
  return parts;
}

}  // namespace

std::vector<std::string> distinct_run_labels(const std::vector<std::string>& run_dirs) {
  std::vector<std::vector<std::string>> parts;
  for (const auto& d : run_dirs) parts.push_back(path_parts(d));
  std::vector<std::string> labels(run_dirs.size());
  // Each label is the shortest tail of its path that no other run's path ends with.
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& p = parts[i];
    size_t take = 1;
    for (; take < p.size(); ++take) {
      bool clash = false;
      for (size_t j = 0; j < parts.size() && !clash; ++j) {
        if (j == i || parts[j].size() < take) continue;
        clash = std::equal(p.end() - static_cast<std::ptrdiff_t>(take), p.end(),
                           parts[j].end() - static_cast<std::ptrdiff_t>(take));
      }
      if (!clash) break;
    }
    for (size_t k = p.size() - std::min(take, p.size()); k < p.size(); ++k)
      labels[i] += (labels[i].empty() ? "" : "/") + p[k];
    if (labels[i].empty()) labels[i] = run_dirs[i];
  }
  // The same directory given twice: the position tells the curves apart.
  for (size_t i = 0; i < labels.size(); ++i)
    if (std::count(labels.begin(), labels.end(), labels[i]) > 1) labels[i] += fmt::format(" #{}", i + 1);
  return labels;
}

namespace {

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
// Training seconds of a line: its `train_seconds` (the trainer's sum over every step, resumes
// included). Lines without it (the PyTorch reference, runs before the field) are estimated: the sum
// of step_seconds over the logged steps, each standing for the steps since the previous line.
struct Clock {
  double tokens_per_step = 0.0, seconds = 0.0, last_step = 0.0, step_seconds = 0.0;
  // An evaluation after steps that were not logged: their time at the last logged step's rate.
  double at(double step) const { return seconds + std::max(0.0, step - last_step) * step_seconds; }
};

// The line's own train_seconds when it has one (and it is a number), else `estimate`.
double train_seconds_or(const nlohmann::json& j, double estimate) {
  return j.contains("train_seconds") ? number(j, "train_seconds") : estimate;
}

bool extract_line(const std::string& line, RunCurves& c, std::ofstream& train, std::ofstream& eval,
                  std::ofstream& epochs, Clock& clock, int64_t& train_lines) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step")) return false;
  const double step = number(j, "step");
  if (j.contains("loss") && j.contains("tokens_seen")) {
    const double tokens = number(j, "tokens_seen"), loss = number(j, "loss");
    const double step_seconds = j.contains("step_seconds") ? number(j, "step_seconds") : 0.0;
    if (step > 0) clock.tokens_per_step = tokens / step;
    clock.seconds = train_seconds_or(j, clock.seconds + step_seconds * std::max(1.0, step - clock.last_step));
    clock.last_step = step;
    clock.step_seconds = step_seconds;
    c.max_tokens = std::max(c.max_tokens, tokens);
    if (j.contains("ranks")) c.ranks = static_cast<int>(number(j, "ranks"));
    train << step << ' ' << tokens << ' ' << clock.seconds << ' ' << loss << '\n';
    ++train_lines;
  }
  if (j.contains("eval_loss")) {
    const double eval_loss = number(j, "eval_loss");
    const bool cls = j.contains("eval_f1");
    const double f1 = cls ? number(j, "eval_f1") : 0.0, accuracy = cls ? number(j, "eval_accuracy") : 0.0;
    const double epoch = cls && j.contains("epoch") ? number(j, "epoch") : 0.0;
    // Evaluation lines carry no token count; every step consumes the same global batch.
    eval << step << ' ' << step * clock.tokens_per_step << ' ' << train_seconds_or(j, clock.at(step)) << ' '
         << eval_loss << '\n';
    if (cls) {
      c.classification = true;
      epochs << epoch << ' ' << accuracy << ' ' << f1 << '\n';
    }
  }
  return true;
}

// Splits metrics.jsonl into whitespace-separated columns gnuplot reads: train "step tokens seconds
// loss", eval "step tokens seconds eval_loss", per-epoch "epoch accuracy f1" (classification). A torn line is
// skipped silently (a crashed run's last line); a line with a field of the wrong type is skipped
// with one warning per file naming file:line and the field.
RunCurves extract(const std::string& run_dir, const std::string& label, const std::string& metrics_file,
                  const std::string& tmp, int index) {
  const std::string src = run_dir + "/" + metrics_file;
  std::ifstream in(src);
  HT_REQUIRE(in.good(), ExitCode::kData, "{}: cannot read (no metrics of a run here)", src);
  RunCurves c;
  c.label = label;
  c.train = fmt::format("{}/train{}.dat", tmp, index);
  c.eval = fmt::format("{}/eval{}.dat", tmp, index);
  c.epochs = fmt::format("{}/epochs{}.dat", tmp, index);
  std::ofstream train(c.train), eval(c.eval), epochs(c.epochs);
  Clock clock;
  int64_t train_lines = 0, line_no = 0, skipped = 0;
  std::string first_fault;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    try {
      extract_line(line, c, train, eval, epochs, clock, train_lines);
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

// The model of a run as its config.toml states it ("4 layers, d_model 128, seq 64"), or "" when
// there is none or it does not parse (a run of another version): the title then omits it.
std::string model_of(const std::string& run_dir) {
  try {
    const config::Config cfg = config::load(run_dir + "/config.toml", {});
    return fmt::format("{} layers, d_model {}, seq {}", cfg.model.n_layer, cfg.model.d_model, cfg.model.seq_len);
  } catch (const std::exception&) {
    return "";
  }
}

std::string title_of(const std::vector<RunCurves>& runs, const std::vector<std::string>& run_dirs) {
  std::string names, models, ranks;
  for (size_t i = 0; i < runs.size(); ++i) {
    names += (i ? ", " : "") + runs[i].label;
    const std::string m = model_of(run_dirs[i]);
    if (!m.empty() && models.find(m) == std::string::npos) models += (models.empty() ? "" : " / ") + m;
    const std::string r = runs[i].ranks > 0 ? std::to_string(runs[i].ranks) : "";
    if (!r.empty() && (ranks.empty() || (", " + ranks + ",").find(", " + r + ",") == std::string::npos))
      ranks += (ranks.empty() ? "" : ", ") + r;
  }
  if (names.size() > 120) names = names.substr(0, 117) + "...";
  std::string title = names;
  if (!models.empty()) title += " | " + models;
  if (!ranks.empty()) title += " | " + ranks + (ranks.find(',') == std::string::npos && ranks == "1" ? " rank" : " ranks");
  return title;
}

// Tokens are drawn in thousands or millions so that every tick has one short %g format (no
// "500000" beside "1e+06", no long last label cut at the right edge).
struct TokenScale {
  double divisor = 1.0;
  const char* unit = "";
};
TokenScale token_scale(const std::vector<RunCurves>& runs) {
  double max_tokens = 0.0;
  for (const auto& r : runs) max_tokens = std::max(max_tokens, r.max_tokens);
  if (max_tokens >= 1e6) return {1e6, " (millions)"};
  if (max_tokens >= 1e4) return {1e3, " (thousands)"};
  return {};
}

std::string loss_script(const std::vector<RunCurves>& runs, const std::string& png, const std::string& title,
                        bool log_x) {
  std::string s = fmt::format(
      "set terminal pngcairo size 1800,560 noenhanced\nset output {}\nset grid\nset key top right\n"
      "set format x '%g'\nset format y '%g'\nset rmargin 4\n{}"
      "set ylabel 'loss (nats)'\nset multiplot layout 1,3 title {}\n",
      quoted(png), log_x ? "set logscale x\n" : "", quoted(title));
  const TokenScale scale = token_scale(runs);
  struct Panel {
    std::string label, column;
  };
  const Panel panels[] = {{"optimizer step", "1"},
                          {std::string("tokens seen") + scale.unit, fmt::format("($2/{})", scale.divisor)},
                          {"training seconds (step times, no evaluations)", "3"}};
  for (const auto& panel : panels) {
    s += fmt::format("set xlabel {}\nplot ", quoted(panel.label + (log_x ? " (log)" : "")));
    std::string parts;
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto& r = runs[i];
      // One colour per run: train as a line, eval as points on the same colour.
      parts += fmt::format("{} using {}:4 with lines lc {} title {}, ", quoted(r.train), panel.column, i + 1,
                           quoted(r.label + " train"));
      std::ifstream probe(r.eval);
      if (probe.peek() != std::ifstream::traits_type::eof())
        parts += fmt::format("{} using {}:4 with linespoints lc {} dt 2 pt 7 title {}, ", quoted(r.eval),
                             panel.column, i + 1, quoted(r.label + " eval"));
    }
    s += parts.substr(0, parts.size() - 2) + "\n";
  }
  return s + "unset multiplot\n";
}

std::string accuracy_script(const std::vector<RunCurves>& runs, const std::string& png, const std::string& title) {
  std::string s = fmt::format(
      "set terminal pngcairo size 900,540 noenhanced\nset output {}\nset grid\nset key bottom right\n"
      "set title {}\nset format x '%g'\nset xlabel 'epoch'\nset ylabel 'validation score'\nset yrange [0:1]\nplot ",
      quoted(png), quoted(title));
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
    const std::vector<std::string> labels = distinct_run_labels(opts.run_dirs);
    for (size_t i = 0; i < opts.run_dirs.size(); ++i) {
      runs.push_back(extract(opts.run_dirs[i], labels[i], opts.metrics_file, tmp, static_cast<int>(i)));
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
    const std::string title = title_of(runs, opts.run_dirs);
    draw("loss", loss_script(runs, opts.output_dir + "/loss.png", title, opts.log_x));
    if (classification) draw("accuracy", accuracy_script(runs, opts.output_dir + "/accuracy.png", title));
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
