// Fuzz target: the config parser. Input bytes -> TOML text and up to four `--set` strings ->
// config::load_text (defaults < TOML < overrides, then validate) and apply_override on defaults.
// Every refusal must be ht::Error(kUsage) naming the key; a config that loads must survive the
// round trip through its own TOML (checkpoints store it so, and eval and resume read it back).
// Findings: any other exception or exit code, a sanitizer report, or a failed round trip.
#include <string>
#include <vector>

#include "config/config.h"
#include "fuzz/fuzz_support.h"

using namespace ht;
using namespace ht::fuzz;

namespace {

// Runs body; a refusal must be a usage error.
template <typename F>
bool usage_errors_only(const char* what, F&& body) {
  try {
    body();
    return true;
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage)
      finding(std::string(what) + ": ht::Error with exit code " + std::to_string(static_cast<int>(e.code())) +
              " instead of kUsage: " + e.what());
    return false;
  } catch (const std::exception& e) {
    finding(std::string(what) + ": exception other than ht::Error: " + e.what());
  } catch (...) {
    finding(std::string(what) + ": non-std exception");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  quiet_process();
  FuzzedDataProvider fdp(data, size);
  std::vector<std::string> sets(fdp.ConsumeIntegralInRange<size_t>(0, 4));
  for (auto& s : sets) s = fdp.ConsumeRandomLengthString(96);
  const std::string toml = fdp.ConsumeRemainingBytesAsString();

  for (const auto& s : sets)
    usage_errors_only("apply_override", [&] {
      config::Config c;
      config::apply_override(c, s);
    });
  config::Config cfg;
  if (!usage_errors_only("load_text", [&] { cfg = config::load_text(toml, "fuzz.toml", sets); })) return 0;
  const std::string dumped = config::to_toml(cfg);
  config::Config again;
  try {
    again = config::load_text(dumped, "round trip", {});
  } catch (const std::exception& e) {
    finding(std::string("a loaded config does not load from its own TOML: ") + e.what() + "\n" + dumped);
  }
  if (config::to_toml(again) != dumped) finding("to_toml(load_text(to_toml(c))) differs from to_toml(c):\n" + dumped);
  return 0;
}
