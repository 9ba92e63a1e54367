// Rank-aware logging to stderr. Rank 0 logs at the configured level; other ranks log warnings
// and errors only (or everything with all_ranks), and every line of a non-zero rank carries
// "[rank N]". A small in-house logger: spdlog from Debian is built against fmt 9, while
// libtorch ships fmt 12 headers first on the include path, so the two cannot be mixed.
#pragma once
#include <fmt/format.h>

#include <string>

namespace ht::log {

enum class Level { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

void init(int rank, int world_size, Level level = Level::kInfo, bool all_ranks = false);
void set_level(Level level);
// Info lines of every rank (log.all_ranks), not only rank 0's.
void set_all_ranks(bool all_ranks);
bool enabled(Level level);
void write(Level level, const std::string& message);
int rank();

}  // namespace ht::log

#define HT_LOG_AT(lvl, ...)                                                                  \
  do {                                                                                       \
    if (::ht::log::enabled(lvl)) ::ht::log::write(lvl, ::fmt::format(__VA_ARGS__));         \
  } while (0)
#define HT_TRACE(...) HT_LOG_AT(::ht::log::Level::kTrace, __VA_ARGS__)
#define HT_DEBUG(...) HT_LOG_AT(::ht::log::Level::kDebug, __VA_ARGS__)
#define HT_INFO(...) HT_LOG_AT(::ht::log::Level::kInfo, __VA_ARGS__)
#define HT_WARN(...) HT_LOG_AT(::ht::log::Level::kWarn, __VA_ARGS__)
#define HT_ERROR(...) HT_LOG_AT(::ht::log::Level::kError, __VA_ARGS__)
