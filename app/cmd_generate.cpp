// `hpctrain generate --checkpoint FILE --prompt TEXT [--max-new-tokens N] [--temperature T]
// [--top-k K] [--top-p P] [--seed S] [--no-kv-cache] [--ignore-eos] [--data FILE]`: prints the
// prompt and a continuation sampled from the checkpoint's averaged model, decoded with the
// tokenizer of its dataset. Timing goes to stderr, the text alone to stdout.
#include <ATen/CPUGeneratorImpl.h>

#include <fmt/ranges.h>

#include <iostream>

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
  std::string checkpoint, prompt, data_path;
  int64_t seed = 42;
  bool no_kv_cache = false, ignore_eos = false, print_ids = false;
  model::SamplingOptions options;
};

void run_generate(const GenerateArgs& a) {
  interop::SavedModel m = interop::load_saved_model(a.checkpoint);
  const data::Tokenizer tok = interop::saved_tokenizer(m, a.data_path);
  std::vector<int64_t> prompt;
  for (auto id : tok.encode(a.prompt)) prompt.push_back(id);
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

Phases configure_generate(CLI::App& sub) {
  auto a = std::make_shared<GenerateArgs>();
  sub.add_option("--checkpoint", a->checkpoint, "checkpoint file (.h5)")->required();
  sub.add_option("--prompt", a->prompt, "text to continue (empty: a new document)")->required();
  sub.add_option("--max-new-tokens", a->options.max_new_tokens, "tokens to generate (default 64)");
  sub.add_option("--temperature", a->options.temperature, "softmax temperature; 0 = greedy (default 1)");
  sub.add_option("--top-k", a->options.top_k, "sample among the k most likely tokens; 0 = all (default)");
  sub.add_option("--top-p", a->options.top_p, "nucleus sampling: the smallest set with this probability (default 1)");
  sub.add_option("--seed", a->seed, "seed of the sampling generator (default 42)");
  sub.add_flag("--no-kv-cache", a->no_kv_cache, "recompute the whole prefix per token (to measure the cache)");
  sub.add_flag("--ignore-eos", a->ignore_eos, "keep generating after <eos> (default: stop there)");
  sub.add_flag("--print-ids", a->print_ids, "also print the generated token ids");
  sub.add_option("--data", a->data_path, "dataset whose tokenizer to use; default: the checkpoint's data.path");
  Phases p;
  // Local work of rank 0 in the set-up phase: its outcome (and message) reaches every rank there.
  p.setup = [a](Context& ctx) {
    if (ctx.comm.rank() == 0) run_generate(*a);
  };
  p.run = [](Context&) { return 0; };
  return p;
}

const Registrar kGenerate{
    Command{"generate", "continue a prompt with a checkpoint's model (greedy or sampled)", configure_generate}};

}  // namespace
}  // namespace ht::app
