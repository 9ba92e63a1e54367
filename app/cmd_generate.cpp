// `hpctrain generate --checkpoint FILE (--prompt TEXT | --prompt-file FILE) [--max-new-tokens N]
// [--temperature T] [--top-k K] [--top-p P] [--seed S] [--no-kv-cache] [--ignore-eos] [--data FILE]`:
// prints the prompt and a continuation sampled from the checkpoint's averaged model, decoded with
// the tokenizer of its dataset. Timing goes to stderr, the text alone to stdout.
#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>

#include <fmt/ranges.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "interop/saved_model.h"
#include "model/generate.h"

namespace ht::app {
namespace {

struct GenerateArgs {
  std::string checkpoint, prompt, prompt_file, data_path;
  int64_t seed = 42;
  bool no_kv_cache = false, ignore_eos = false, print_ids = false;
  model::SamplingOptions options;
};

// The prompt file's bytes as they are (a final newline included): long prompts do not fit a
// command line (docs/interop.md). A pipe (`--prompt-file <(...)`) is fine; a directory is not.
std::string read_prompt_file(const std::string& path) {
  struct stat st {};
  HT_REQUIRE(::stat(path.c_str(), &st) == 0, ExitCode::kData, "generate: --prompt-file {}: {}", path,
             std::strerror(errno));
  HT_REQUIRE(!S_ISDIR(st.st_mode), ExitCode::kData, "generate: --prompt-file {}: is a directory", path);
  std::ifstream in(path, std::ios::binary);
  HT_REQUIRE(in.is_open(), ExitCode::kData, "generate: --prompt-file {}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  HT_REQUIRE(!in.bad(), ExitCode::kData, "generate: --prompt-file {}: read failed: {}", path, std::strerror(errno));
  return text.str();
}

void run_generate(const GenerateArgs& a) {
  const std::string text = a.prompt_file.empty() ? a.prompt : read_prompt_file(a.prompt_file);
  interop::SavedModel m = interop::load_saved_model(a.checkpoint);
  const data::Tokenizer tok = interop::saved_tokenizer(m, a.data_path);
  std::vector<int64_t> prompt;
  for (auto id : tok.encode(text)) prompt.push_back(id);
  if (prompt.empty()) prompt.push_back(data::kEosId);  // an empty prompt starts a new document
  model::SamplingOptions o = a.options;
  o.kv_cache = !a.no_kv_cache;
  o.stop_id = a.ignore_eos ? -1 : data::kEosId;
  model::check_sampling(*m.gpt, static_cast<int64_t>(prompt.size()), o);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(a.seed));
  Stopwatch sw;
  const auto ids = model::generate(*m.gpt, prompt, o, gen);
  const double seconds = sw.seconds();
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), ids.begin(), ids.end());
  std::cout << tok.decode(all) << "\n";
  if (a.print_ids) std::cout << "ids " << fmt::format("{}", fmt::join(ids, " ")) << "\n";
  std::cerr << fmt::format("generated {} tokens in {:.3f}s ({:.1f} tokens/s, KV cache {})\n", ids.size(), seconds,
                           static_cast<double>(ids.size()) / seconds, o.kv_cache ? "on" : "off");
}

// CLI11 converts an integer that does not fit int64 to its maximum without a word; refused here,
// naming the value as typed, so that no later bound sees a number the user never gave.
CLI::Validator fits_int64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        std::strtoll(text.c_str(), &end, 0);
        if (errno != ERANGE) return "";
        return fmt::format("{} does not fit a 64-bit integer (at most 9223372036854775807)", text);
      },
      "");
}

Phases configure_generate(CLI::App& sub) {
  auto a = std::make_shared<GenerateArgs>();
  sub.add_option("--checkpoint", a->checkpoint, "checkpoint file (.h5)")->required();
  auto* prompt = sub.add_option("--prompt", a->prompt, "text to continue (empty: a new document)");
  sub.add_option("--prompt-file", a->prompt_file,
                 "read the text to continue from FILE, as it is (for long prompts: a command line holds at most "
                 "128 KiB)")
      ->type_name("FILE")
      ->excludes(prompt);
  sub.add_option("--max-new-tokens", a->options.max_new_tokens, "tokens to generate (default 64)")
      ->check(fits_int64());
  sub.add_option("--temperature", a->options.temperature, "softmax temperature; 0 = greedy (default 1)");
  sub.add_option("--top-k", a->options.top_k, "sample among the k most likely tokens; 0 = all (default)")
      ->check(fits_int64());
  sub.add_option("--top-p", a->options.top_p, "nucleus sampling: the smallest set with this probability (default 1)");
  sub.add_option("--seed", a->seed, "seed of the sampling generator (default 42)")->check(fits_int64());
  sub.add_flag("--no-kv-cache", a->no_kv_cache, "recompute the whole prefix per token (to measure the cache)");
  sub.add_flag("--ignore-eos", a->ignore_eos, "keep generating after <eos> (default: stop there)");
  sub.add_flag("--print-ids", a->print_ids, "also print the generated token ids");
  sub.add_option("--data", a->data_path, "dataset whose tokenizer to use; default: the checkpoint's data.path");
  Phases p;
  // Local work of rank 0 in the set-up phase: its outcome (and message) reaches every rank there.
  p.setup = [a, prompt](Context& ctx) {
    HT_REQUIRE(prompt->count() > 0 || !a->prompt_file.empty(), ExitCode::kUsage,
               "generate: give the text to continue with --prompt TEXT or --prompt-file FILE");
    if (ctx.comm.rank() == 0) run_generate(*a);
  };
  p.run = [](Context&) { return 0; };
  return p;
}

const Registrar kGenerate{
    Command{"generate", "continue a prompt with a checkpoint's model (greedy or sampled)", configure_generate}};

}  // namespace
}  // namespace ht::app
