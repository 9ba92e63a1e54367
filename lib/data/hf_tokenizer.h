// Export of an hpctrain Tokenizer (byte or BPE) as a Hugging Face `tokenizers` tokenizer.json that
// encodes text to exactly the ids Tokenizer::encode gives, plus the matching tokenizer_config.json
// for transformers' PreTrainedTokenizerFast.
//
// The mapping: ids 0..255 are the bytes, spelled with GPT-2's byte-to-unicode characters; 256
// `<pad>` and 257 `<eos>` are special added tokens; BPE merge i (ids a, b) becomes the merge
// "piece(a) piece(b)" creating id 258 + i. The pre-tokenizer is a Split whose regex (kHfSplitRegex)
// cuts text exactly where split_words does (behavior "Isolated": every character belongs to some
// match, so each match is one word), followed by ByteLevel without its own regex. The `tokenizers`
// BPE applies the lowest-ranked merge first, leftmost first among equal ranks, which is the order
// Tokenizer::encode_word uses, so the ids agree word by word.
//
// Where the two cannot agree (tests/python/hf_tokenizer_check.py shows each):
//  - text that is not valid UTF-8: `tokenizers` takes Unicode strings only, so such text cannot be
//    given to it at all, and decoding its byte ids yields U+FFFD replacement characters;
//  - the literal strings "<pad>" and "<eos>" in text become the special ids 256/257 in `tokenizers`
//    unless `tokenizer.encode_special_tokens = True` (transformers: split_special_tokens=True, which
//    the config written by to_hf_tokenizer_config_json sets); hpctrain encodes them as bytes;
//  - two merges that spell the same bytes cannot both be expressed (a vocabulary maps each string to
//    one id): to_hf_tokenizer_json refuses such a tokenizer, naming both merges. train_bpe never
//    learns one (a token forms only as its bytes alone would merge, so each spelling has one merge
//    tree); only hand-made merge lists given to from_merges can hold one.
#pragma once
#include <cstdint>
#include <string>

#include "data/tokenizer.h"

namespace ht::data {

// The regex (Oniguruma syntax) equivalent to split_words: a letter run (ASCII letters and every
// non-ASCII character), a digit run or an ASCII punctuation/control run, each with an optional
// leading space; a run of spaces; a run of \t \n \v \f \r.
extern const char* const kHfSplitRegex;

// GPT-2's printable stand-in (UTF-8) for one byte, as used by the ByteLevel pre-tokenizer/decoder.
std::string hf_byte_char(uint8_t byte);

// tokenizer.json text (pretty-printed, UTF-8). Throws ht::Error(kData) when two merges spell the
// same bytes (see above).
std::string to_hf_tokenizer_json(const Tokenizer& tok);

// tokenizer_config.json text for transformers' PreTrainedTokenizerFast (the same for the byte and
// BPE tokenizers): eos/pad tokens, the model's context length and split_special_tokens = true (see
// above).
std::string to_hf_tokenizer_config_json(int64_t model_max_length);

}  // namespace ht::data
