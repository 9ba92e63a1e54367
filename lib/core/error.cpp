#include "core/error.h"

#include <cstring>

namespace ht {

std::string source_location(const char* file, int line) {
  const char* base = std::strstr(file, "/lib/");
  return fmt::format("{}:{}", base ? base + 1 : file, line);
}

}  // namespace ht
