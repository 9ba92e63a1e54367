#include "train/plot.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "core/log.h"

extern char** environ;

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

// Splits metrics.jsonl into whitespace-separated columns gnuplot reads: train "step tokens loss",
// eval "step tokens eval_loss", per-epoch "epoch accuracy f1" (classification).
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
  int64_t train_lines = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step")) continue;  // a torn last line
    const double step = j["step"].get<double>();
    if (j.contains("loss") && j.contains("tokens_seen")) {
      const double tokens = j["tokens_seen"].get<double>();
      if (step > 0) tokens_per_step = tokens / step;
      train << step << ' ' << tokens << ' ' << j["loss"].get<double>() << '\n';
      ++train_lines;
    }
    if (j.contains("eval_loss")) {
      // Evaluation lines carry no token count; every step consumes the same global batch.
      eval << step << ' ' << step * tokens_per_step << ' ' << j["eval_loss"].get<double>() << '\n';
      if (j.contains("eval_f1")) {
        c.classification = true;
        epochs << j.value("epoch", 0) << ' ' << j["eval_accuracy"].get<double>() << ' ' << j["eval_f1"].get<double>()
               << '\n';
      }
    }
  }
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

// Runs `gnuplot script` and waits at most timeout_s; its output goes to our stderr.
void run_gnuplot(const std::string& gnuplot, const std::string& script, double timeout_s) {
  std::vector<char*> argv = {const_cast<char*>(gnuplot.c_str()), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, gnuplot.c_str(), nullptr, nullptr, argv.data(), environ);
  HT_REQUIRE(rc == 0, ExitCode::kData, "plot: cannot start {}: {}", gnuplot, std::strerror(rc));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) HT_FAIL(ExitCode::kData, "plot: waiting for gnuplot failed: {}", std::strerror(errno));
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      HT_FAIL(ExitCode::kData, "plot: gnuplot did not finish within {:.0f} s (script {})", timeout_s, script);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  HT_REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, ExitCode::kData, "plot: gnuplot failed on {} (status {})",
             script, status);
}

}  // namespace

std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/gnuplot";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

std::vector<std::string> plot_runs(const PlotOptions& opts) {
  HT_REQUIRE(!opts.run_dirs.empty(), ExitCode::kUsage, "plot: no run directory given");
  const std::string gnuplot = find_gnuplot();
  if (gnuplot.empty()) {
    HT_INFO("plot: gnuplot not found in PATH; no loss.png drawn (install gnuplot-nox)");
    return {};
  }
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
      run_gnuplot(gnuplot, script, opts.timeout_s);
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
