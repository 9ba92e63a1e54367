#include "data/tokenizer.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "io/h5.h"

namespace ht::data {
namespace {

enum class CharClass { kLetter, kDigit, kSpace, kOtherSpace, kPunct };

CharClass classify(unsigned char c) {
  if (c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;  // UTF-8 stays whole
  if (c >= '0' && c <= '9') return CharClass::kDigit;
  if (c == ' ') return CharClass::kSpace;
  if (c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v') return CharClass::kOtherSpace;
  return CharClass::kPunct;
}

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

struct WordCount {
  std::vector<uint32_t> symbols;
  int64_t count;
};

void add_pairs(const WordCount& w, std::unordered_map<uint64_t, int64_t>& pairs, int64_t sign) {
  for (size_t i = 0; i + 1 < w.symbols.size(); ++i) pairs[pair_key(w.symbols[i], w.symbols[i + 1])] += sign * w.count;
}

bool contains_pair(const std::vector<uint32_t>& s, uint32_t a, uint32_t b) {
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i] == a && s[i + 1] == b) return true;
  return false;
}

void merge_in_place(std::vector<uint32_t>& s, uint32_t a, uint32_t b, uint32_t id) {
  size_t out = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
      s[out++] = id;
      ++i;
    } else {
      s[out++] = s[i];
    }
  }
  s.resize(out);
}

std::vector<WordCount> count_words(const std::vector<std::string>& docs) {
  std::map<std::string, int64_t> counts;  // ordered: the training order does not depend on hashing
  for (const auto& d : docs)
    for (auto& w : split_words(d)) ++counts[w];
  std::vector<WordCount> words;
  words.reserve(counts.size());
  for (const auto& [w, c] : counts) {
    WordCount wc{{}, c};
    for (unsigned char ch : w) wc.symbols.push_back(ch);
    words.push_back(std::move(wc));
  }
  return words;
}

}  // namespace

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    size_t start = i;
    auto cls = classify(static_cast<unsigned char>(text[i]));
    // A single space attaches to the following non-space run (" word", " 42", " !").
    if (cls == CharClass::kSpace && i + 1 < n) {
      const auto next = classify(static_cast<unsigned char>(text[i + 1]));
      if (next != CharClass::kSpace && next != CharClass::kOtherSpace) {
        ++i;
        cls = next;
      }
    }
    while (i < n && classify(static_cast<unsigned char>(text[i])) == cls) ++i;
    words.push_back(text.substr(start, i - start));
  }
  return words;
}

Tokenizer Tokenizer::bytes() {
  Tokenizer t;
  t.build_tables();
  return t;
}

Tokenizer Tokenizer::from_merges(std::vector<Merge> merges) {
  Tokenizer t;
  t.kind_ = TokenizerKind::kBpe;
  t.merges_ = std::move(merges);
  t.build_tables();
  return t;
}

void Tokenizer::build_tables() {
  pieces_.assign(static_cast<size_t>(kByteVocab), std::string());
  for (int i = 0; i < 256; ++i) pieces_[static_cast<size_t>(i)] = std::string(1, static_cast<char>(i));
  rank_.clear();
  for (size_t i = 0; i < merges_.size(); ++i) {
    const auto [a, b] = merges_[i];
    const uint32_t id = static_cast<uint32_t>(kByteVocab + static_cast<int64_t>(i));
    HT_REQUIRE(a < id && b < id && a != kPadId && a != kEosId && b != kPadId && b != kEosId, ExitCode::kData,
               "BPE merge {} ({}, {}) refers to an undefined or special token", i, a, b);
    HT_REQUIRE(pieces_[a].size() + pieces_[b].size() <= kMaxTokenBytes, ExitCode::kData,
               "BPE merge {} ({}, {}) makes a token of {} bytes, more than the limit of {} (damaged merge list?)", i,
               a, b, pieces_[a].size() + pieces_[b].size(), kMaxTokenBytes);
    pieces_.push_back(pieces_[a] + pieces_[b]);
    rank_.emplace(pair_key(a, b), static_cast<uint32_t>(i));
  }
  cache_.clear();
}

Tokenizer Tokenizer::train_bpe(const std::vector<std::string>& docs, int64_t vocab_size, bool progress) {
  HT_REQUIRE(vocab_size >= kByteVocab, ExitCode::kUsage, "--vocab-size {} is below the byte vocabulary ({})",
             vocab_size, kByteVocab);
  std::vector<WordCount> words = count_words(docs);
  std::unordered_map<uint64_t, int64_t> pairs;
  for (const auto& w : words) add_pairs(w, pairs, 1);
  std::vector<Merge> merges;
  std::vector<size_t> token_bytes(static_cast<size_t>(kByteVocab), 1);  // id -> length of its byte string
  auto merged_bytes = [&](uint64_t key) { return token_bytes[key >> 32] + token_bytes[key & 0xffffffffu]; };
  const int64_t target = vocab_size - kByteVocab;
  while (static_cast<int64_t>(merges.size()) < target) {
    uint64_t best = 0;
    int64_t best_count = 1;  // a pair seen once is not worth a token
    for (const auto& [key, c] : pairs)
      if ((c > best_count || (c == best_count && c > 1 && key < best)) && merged_bytes(key) <= kMaxTokenBytes) {
        best = key;
        best_count = c;
      }
    if (best_count < 2) break;
    const auto a = static_cast<uint32_t>(best >> 32), b = static_cast<uint32_t>(best & 0xffffffffu);
    const auto id = static_cast<uint32_t>(kByteVocab + static_cast<int64_t>(merges.size()));
    token_bytes.push_back(merged_bytes(best));
    for (auto& w : words) {
      if (!contains_pair(w.symbols, a, b)) continue;
      add_pairs(w, pairs, -1);
      merge_in_place(w.symbols, a, b, id);
      add_pairs(w, pairs, 1);
    }
    for (auto it = pairs.begin(); it != pairs.end();) it = it->second == 0 ? pairs.erase(it) : std::next(it);
    merges.emplace_back(a, b);
    if (progress && target >= 10 && merges.size() % static_cast<size_t>(target / 10) == 0)
      HT_INFO("prepare: BPE {}/{} merges", merges.size(), target);
  }
  if (static_cast<int64_t>(merges.size()) < target)
    HT_INFO("prepare: BPE stopped at {} merges (no pair occurs twice more within {} bytes); vocab_size = {}",
            merges.size(), kMaxTokenBytes, kByteVocab + static_cast<int64_t>(merges.size()));
  return from_merges(std::move(merges));
}

void Tokenizer::encode_word(const std::string& word, std::vector<uint32_t>& out) const {
  auto hit = cache_.find(word);
  if (hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<uint32_t> s(word.begin(), word.end());
  for (auto& v : s) v &= 0xffu;  // chars may be signed
  while (s.size() > 1) {  // apply the earliest-learned merge present, as training did
    uint32_t best_rank = UINT32_MAX;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      auto r = rank_.find(pair_key(s[i], s[i + 1]));
      if (r != rank_.end()) best_rank = std::min(best_rank, r->second);
    }
    if (best_rank == UINT32_MAX) break;
    const auto [a, b] = merges_[best_rank];
    merge_in_place(s, a, b, static_cast<uint32_t>(kByteVocab + best_rank));
  }
  out.insert(out.end(), s.begin(), s.end());
  if (cache_.size() < (1u << 20)) cache_.emplace(word, std::move(s));
}

std::vector<uint32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  if (merges_.empty()) {
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  for (const auto& w : split_words(text)) encode_word(w, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    HT_REQUIRE(id >= 0 && id < vocab_size(), ExitCode::kData, "token id {} outside the vocabulary (size {})", id,
               vocab_size());
    out += pieces_[static_cast<size_t>(id)];
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  return decode(std::vector<int64_t>(ids.begin(), ids.end()));
}

void Tokenizer::save(const io::File& file) const {
  io::Handle g = io::create_group(file.id(), "tokenizer");
  io::set_attr(g.id(), "kind", std::string(config::name_of(kind_)));
  io::set_attr(g.id(), "vocab_size", vocab_size());
  if (kind_ != TokenizerKind::kBpe) return;
  std::vector<uint32_t> flat;
  for (const auto& [a, b] : merges_) { flat.push_back(a); flat.push_back(b); }
  io::write(g.id(), "merges", flat, {static_cast<io::Size>(merges_.size()), 2});
}

Tokenizer Tokenizer::load(const std::string& dataset_path) {
  return load(io::File::open_read(dataset_path));
}

Tokenizer Tokenizer::load(const io::File& f) {
  const io::Id file = f.id();
  const std::string& dataset_path = f.path();
  const std::string kind = io::has_attr(file, "tokenizer") ? io::attr_string(file, "tokenizer") : "";
  if (kind == "byte") return bytes();
  HT_REQUIRE(kind == "bpe", ExitCode::kData, "{}: unknown tokenizer '{}' (expected byte or bpe)", dataset_path, kind);
  HT_REQUIRE(io::exists(file, "/tokenizer/merges"), ExitCode::kData,
             "{}: tokenizer is bpe but dataset /tokenizer/merges is missing", dataset_path);
  const auto i = io::info(file, "/tokenizer/merges");
  HT_REQUIRE(i.type_class == io::TypeClass::kInteger && i.dims.size() == 2 && i.dims[1] == 2, ExitCode::kData,
             "{}:/tokenizer/merges must be an integer [M, 2] dataset", dataset_path);
  std::vector<uint32_t> flat;
  try {
    flat = io::read<uint32_t>(file, "/tokenizer/merges");
  } catch (const Error&) {
    HT_FAIL(ExitCode::kData, "checksum mismatch in {}:/tokenizer/merges", dataset_path);
  }
  std::vector<Merge> merges;
  for (size_t i2 = 0; i2 + 1 < flat.size(); i2 += 2) merges.emplace_back(flat[i2], flat[i2 + 1]);
  try {
    return from_merges(std::move(merges));
  } catch (const Error& e) {
    HT_FAIL(e.code(), "{}:/tokenizer/merges: {}", dataset_path, e.what());
  }
}

}  // namespace ht::data
