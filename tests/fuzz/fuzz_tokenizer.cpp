// Fuzz target: the BPE tokenizer. Input bytes -> merges (mostly well-formed: each refers to
// earlier ids; sometimes any pair) -> Tokenizer::from_merges; then text from the input ->
// encode -> decode must give back the text exactly, with every id inside the vocabulary; and a
// tokenizer trained on that text (train_bpe) must round-trip it too and rebuild from its merges.
// Findings: an exception other than ht::Error, a sanitizer report, a lossy round trip.
#include <algorithm>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz/fuzz_support.h"

using namespace ht;
using namespace ht::fuzz;
using data::Tokenizer;

namespace {

void round_trip(const Tokenizer& tok, const std::string& text, const char* which) {
  const std::vector<uint32_t> ids = tok.encode(text);
  for (uint32_t id : ids)
    if (static_cast<int64_t>(id) >= tok.vocab_size())
      finding(std::string(which) + ": encode produced id " + std::to_string(id) + " outside the vocabulary");
  if (tok.decode(ids) != text) finding(std::string(which) + ": decode(encode(text)) != text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  quiet_process();
  FuzzedDataProvider fdp(data, size);
  std::vector<Tokenizer::Merge> merges(fdp.ConsumeIntegralInRange<size_t>(0, 300));
  for (size_t i = 0; i < merges.size(); ++i) {
    const uint32_t next = static_cast<uint32_t>(data::kByteVocab + i);  // the id merge i creates
    if (fdp.ConsumeIntegralInRange<int>(0, 15) == 15) {
      merges[i] = {fdp.ConsumeIntegral<uint32_t>(), fdp.ConsumeIntegral<uint32_t>()};
    } else {
      auto pick = [&] {  // any earlier id, a recent one (chains of merges), or a byte
        uint32_t v = 'a';
        switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
          case 0: v = fdp.ConsumeIntegralInRange<uint32_t>(0, next - 1); break;
          case 1: v = next - 1 - std::min<uint32_t>(next - 1, fdp.ConsumeIntegralInRange<uint32_t>(0, 2)); break;
          default: v = fdp.ConsumeIntegral<uint8_t>(); break;
        }
        return v == data::kPadId || v == data::kEosId ? static_cast<uint32_t>('a') : v;
      };
      merges[i] = {pick(), pick()};
    }
  }
  const std::string text = fdp.ConsumeRemainingBytesAsString();
  bool built = false;
  only_ht_errors("from_merges", [&] {
    const Tokenizer tok = Tokenizer::from_merges(merges);
    built = true;
    round_trip(tok, text, "from_merges");
  });
  // Training on the text: at most 64 merges keep an iteration cheap.
  only_ht_errors("train_bpe", [&] {
    std::vector<std::string> docs;
    for (size_t at = 0; at < text.size();) {
      const size_t nl = text.find('\n', at);
      const size_t end = nl == std::string::npos ? text.size() : nl + 1;
      docs.push_back(text.substr(at, end - at));
      at = end;
    }
    const Tokenizer trained = Tokenizer::train_bpe(docs, data::kByteVocab + 64);
    round_trip(trained, text, "train_bpe");
    const Tokenizer rebuilt = Tokenizer::from_merges(trained.merges());
    if (rebuilt.encode(text) != trained.encode(text)) finding("a tokenizer rebuilt from its merges encodes differently");
  });
  (void)built;
  return 0;
}
