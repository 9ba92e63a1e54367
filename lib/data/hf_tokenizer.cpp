#include "data/hf_tokenizer.h"

#include <array>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace ht::data {

// Mirrors classify() in tokenizer.cpp: letters are [A-Za-z] and every non-ASCII character (its
// UTF-8 bytes are all >= 0x80), digits [0-9], the space, the other ASCII whitespace \t\n\v\f\r, and
// everything else of ASCII (punctuation and control characters) is punctuation. Alternatives are
// tried in order, each greedy: " ?L+" takes a single space before a letter run, " +" a run of
// spaces that no such run follows (all of them, as split_words does).
const char* const kHfSplitRegex =
    " ?[^\\x00-\\x40\\x5B-\\x60\\x7B-\\x7F]+"
    "| ?[0-9]+"
    "| ?[\\x00-\\x08\\x0E-\\x1F\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7F]+"
    "| +"
    "|[\\x09-\\x0D]+";

namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes map
// in increasing order to U+0100, U+0101, ...
std::array<uint32_t, 256> byte_code_points() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

std::string utf8(uint32_t cp) {  // code points below U+0800 are all this mapping needs
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// The vocabulary strings of every id; specials spelled as themselves.
std::vector<std::string> vocab_strings(const Tokenizer& tok) {
  std::vector<std::string> v(static_cast<size_t>(tok.vocab_size()));
  for (int b = 0; b < 256; ++b) v[static_cast<size_t>(b)] = hf_byte_char(static_cast<uint8_t>(b));
  v[kPadId] = "<pad>";
  v[kEosId] = "<eos>";
  const auto& merges = tok.merges();
  for (size_t i = 0; i < merges.size(); ++i) v[kByteVocab + i] = v[merges[i].first] + v[merges[i].second];
  return v;
}

// A vocabulary maps strings to ids: two ids with one spelling cannot both survive the export.
void require_unique_spellings(const Tokenizer& tok, const std::vector<std::string>& vocab) {
  std::unordered_map<std::string, size_t> first;
  for (size_t id = 0; id < vocab.size(); ++id) {
    const auto [it, fresh] = first.emplace(vocab[id], id);
    if (fresh) continue;
    const auto describe = [&](size_t t) {
      if (t < static_cast<size_t>(kByteVocab)) return fmt::format("token {}", t);
      const auto& m = tok.merges()[t - static_cast<size_t>(kByteVocab)];
      return fmt::format("BPE merge {} ({}, {})", t - static_cast<size_t>(kByteVocab), m.first, m.second);
    };
    HT_FAIL(ExitCode::kData,
            "tokenizer export: {} spells the same bytes as {}; a Hugging Face vocabulary maps each string to one "
            "id, so the exported tokenizer could not reproduce hpctrain's ids",
            describe(id), describe(it->second));
  }
}

nlohmann::ordered_json added_token(int64_t id, const std::string& content) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", true}};
}

nlohmann::ordered_json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

}  // namespace

std::string hf_byte_char(uint8_t byte) {
  static const std::array<uint32_t, 256> kCodePoints = byte_code_points();
  return utf8(kCodePoints[byte]);
}

std::string to_hf_tokenizer_json(const Tokenizer& tok) {
  const std::vector<std::string> vocab = vocab_strings(tok);
  require_unique_spellings(tok, vocab);
  nlohmann::ordered_json v = nlohmann::ordered_json::object();
  for (size_t id = 0; id < vocab.size(); ++id) v[vocab[id]] = id;
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : tok.merges()) merges.push_back(vocab[a] + " " + vocab[b]);  // no ' ' in ByteLevel text

  nlohmann::ordered_json split = {{"type", "Split"},
                                  {"pattern", {{"Regex", kHfSplitRegex}}},
                                  {"behavior", "Isolated"},
                                  {"invert", false}};
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {added_token(kPadId, "<pad>"), added_token(kEosId, "<eos>")};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level(false)}}};
  j["post_processor"] = nullptr;
  j["decoder"] = byte_level(false);
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr},
                {"unk_token", nullptr},    {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false},  {"ignore_merges", false},
                {"vocab", v},              {"merges", merges}};
  return j.dump(2) + "\n";
}

std::string to_hf_tokenizer_config_json(int64_t model_max_length) {
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["eos_token"] = "<eos>";
  j["pad_token"] = "<pad>";
  j["model_max_length"] = model_max_length;
  j["clean_up_tokenization_spaces"] = false;
  j["split_special_tokens"] = true;  // "<eos>" typed in text stays bytes, as in hpctrain
  return j.dump(2) + "\n";
}

}  // namespace ht::data
