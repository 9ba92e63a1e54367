#include "core/signals.h"

#include <cerrno>
#include <csignal>
#include <cstring>

#include "core/error.h"

namespace ht::signals {
namespace {

// Written only by the handler (and reset), read by the loop: the only state a handler may touch.
volatile std::sig_atomic_t g_pending = 0;
volatile std::sig_atomic_t g_last = 0;

extern "C" void on_signal(int sig) {
  // Async-signal-safe: two stores, no allocation, no locks, no I/O, errno untouched.
  g_last = sig;
  g_pending = 1;
}

void install_one(int sig) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  HT_REQUIRE(::sigaction(sig, &sa, nullptr) == 0, ExitCode::kRuntime, "sigaction({}) failed: {}", sig,
             std::strerror(errno));
}

}  // namespace

void install() {
  install_one(SIGTERM);
  install_one(SIGUSR1);
}

bool pending() { return g_pending != 0; }
int last_signal() { return static_cast<int>(g_last); }

const char* last_signal_name() {
  switch (g_last) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "none";
  }
}

void reset_for_tests() {
  g_pending = 0;
  g_last = 0;
}

}  // namespace ht::signals
