#include "train/report/gnuplot.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "core/error.h"

extern char** environ;

namespace ht::train {
namespace {

// How a child ended, in words ("exit status 1", "killed by signal 10 (User defined signal 1)").
std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

// gnuplot's messages on one line: its lines without the caret markers, the last 300 characters.
std::string shortened(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line.substr(first) == "^") continue;
    text += (text.empty() ? "" : " / ") + line.substr(first);
  }
  constexpr size_t kMaxChars = 300;
  if (text.size() > kMaxChars) text = "..." + text.substr(text.size() - kMaxChars);
  return text.empty() ? "no message" : text;
}

// Starts gnuplot on script: stdout to /dev/null, stderr to log, pre-emption signals blocked.
pid_t spawn(const std::string& gnuplot, const std::string& script, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGUSR1);
  sigaddset(&blocked, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &blocked);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv = {const_cast<char*>(gnuplot.c_str()), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, gnuplot.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  HT_REQUIRE(rc == 0, ExitCode::kData, "plot: cannot start {}: {}", gnuplot, std::strerror(rc));
  return pid;
}

// True with pid's wait status once it ended; false when timeout_s passed first (pid is then killed).
bool wait_for(pid_t pid, double timeout_s, int& status) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return true;
    if (done < 0 && errno != EINTR)
      HT_FAIL(ExitCode::kData, "plot: waiting for gnuplot failed: {}", std::strerror(errno));
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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

void run_gnuplot(const std::string& gnuplot, const std::string& script, const std::string& png, double timeout_s) {
  const std::string log = script + ".log";
  int status = 0;
  const bool finished = wait_for(spawn(gnuplot, script, log), timeout_s, status);
  const std::string said = shortened(log);
  ::unlink(log.c_str());
  HT_REQUIRE(finished, ExitCode::kData, "plot: gnuplot did not draw {} within {:.0f} s (killed)", png, timeout_s);
  HT_REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, ExitCode::kData, "plot: gnuplot could not draw {} ({}): {}",
             png, describe_status(status), said);
}

}  // namespace ht::train
