#include "core/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>


namespace ht::log {
namespace {
int g_rank = 0;
int g_world = 1;
bool g_all_ranks = false;
Level g_level = Level::kInfo;
std::mutex g_mutex;

const char* tag(Level l) {
  switch (l) {
    case Level::kTrace: return "trace";
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
    case Level::kOff: return "off";
  }
  return "?";
}
}  // namespace

void init(int rank, int world_size, Level level, bool all_ranks) {
  g_rank = rank;
  g_world = world_size;
  g_all_ranks = all_ranks;
  g_level = level;
}

void set_level(Level level) { g_level = level; }
void set_all_ranks(bool all_ranks) { g_all_ranks = all_ranks; }

bool enabled(Level level) {
  if (level < g_level) return false;
  return g_rank == 0 || g_all_ranks || level >= Level::kWarn;
}

void write(Level level, const std::string& message) {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[16];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  const std::string who = g_world > 1 && g_rank != 0 ? fmt::format(" [rank {}]", g_rank) : "";
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[%s] [%s]%s %s\n", stamp, tag(level), who.c_str(), message.c_str());
  std::fflush(stderr);
}

int rank() { return g_rank; }

}  // namespace ht::log
