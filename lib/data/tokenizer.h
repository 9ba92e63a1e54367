// Tokenizers of dataset files: the built-in byte tokenizer (ids 0..255 = bytes, 256 = <pad>,
// 257 = <eos>) and a deterministic byte-level BPE trained on the input text. Both are lossless:
// decode(encode(text)) == text for any byte string. The BPE merges are stored in the dataset
// file (/tokenizer/merges) so that evaluation and later runs decode exactly as prepare encoded.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/enum_names.h"

namespace ht::io {
class File;
}  // namespace ht::io

namespace ht::data {

enum class TokenizerKind { kByte, kBpe };

}  // namespace ht::data

HT_ENUM_NAMES(ht::data::TokenizerKind, {ht::data::TokenizerKind::kByte, "byte"}, {ht::data::TokenizerKind::kBpe, "bpe"})

namespace ht::data {

inline constexpr int64_t kPadId = 256;
inline constexpr int64_t kEosId = 257;
inline constexpr int64_t kByteVocab = 258;  // 256 bytes + <pad> + <eos>
// The longest byte string one BPE token may stand for. A merge list is a tree, so without a bound
// a few dozen merges that each join a token with itself describe a 2^40-byte token: a tiny file
// would exhaust memory. Training never creates a longer token; loading refuses one.
inline constexpr size_t kMaxTokenBytes = 1024;

class Tokenizer {
 public:
  using Merge = std::pair<uint32_t, uint32_t>;  // merge i creates token id kByteVocab + i

  static Tokenizer bytes();
  // Learns up to vocab_size - kByteVocab merges from docs (fewer when no pair occurs twice, or only
  // pairs whose token would exceed kMaxTokenBytes).
  // Ties between equally frequent pairs go to the smaller (left, right) id pair: deterministic.
  static Tokenizer train_bpe(const std::vector<std::string>& docs, int64_t vocab_size, bool progress = false);
  // Throws kData naming the merge when it refers to an undefined or special id, or when its token
  // would be longer than kMaxTokenBytes.
  static Tokenizer from_merges(std::vector<Merge> merges);
  // Reads the tokenizer of an open dataset file (attribute `tokenizer` + /tokenizer/merges);
  // errors name the file's path.
  static Tokenizer load(const io::File& file);
  static Tokenizer load(const std::string& dataset_path);
  // Writes the /tokenizer group (merges for BPE) into an open file.
  void save(const io::File& file) const;

  TokenizerKind kind() const { return kind_; }
  int64_t vocab_size() const { return kByteVocab + static_cast<int64_t>(merges_.size()); }
  const std::vector<Merge>& merges() const { return merges_; }

  std::vector<uint32_t> encode(const std::string& text) const;
  // Special tokens (<pad>, <eos>) decode to nothing; ids outside the vocabulary throw kData.
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string decode(const std::vector<uint32_t>& ids) const;

 private:
  Tokenizer() = default;
  void build_tables();
  void encode_word(const std::string& word, std::vector<uint32_t>& out) const;

  TokenizerKind kind_ = TokenizerKind::kByte;
  std::vector<Merge> merges_;
  std::unordered_map<uint64_t, uint32_t> rank_;  // (left << 32 | right) -> merge index
  std::vector<std::string> pieces_;              // id -> bytes
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;  // word -> ids
};

// Splits text into BPE "words" (a leading space plus a run of letters/digits/punctuation, or a
// whitespace run); concatenating the words gives back the text. Merges never cross words.
std::vector<std::string> split_words(const std::string& text);

}  // namespace ht::data
