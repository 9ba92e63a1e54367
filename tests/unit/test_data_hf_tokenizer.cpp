// Export of the byte and BPE tokenizers as a Hugging Face tokenizer.json: the byte-to-character
// table, the JSON layout (vocabulary, merges, special tokens, pre-tokenizer), the refusal of merges
// that share a spelling, and (when the Python venv of scripts/setup-python.sh exists) the real
// `tokenizers` and transformers libraries encoding a multilingual text and edge cases to exactly
// our ids through tests/python/hf_tokenizer_check.py.
#include "data/hf_tokenizer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "support/temp_dir.h"

using namespace ht::data;

namespace {

// A few sentences in the languages of the fortune corpora, punctuation, digits and whitespace runs.
const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = {
      "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs!",
      "  Indented line\n\tTabbed line\r\nWindows line end   \n\n\nThree blank lines.",
      "Numbers: 3.14159, 2718281828, 1000000 and 42 -- 0x7f; 1+1=2?",
      "Der schnelle braune Fuchs springt \xc3\xbc" "ber den faulen Hund. Stra\xc3\x9f" "e, Gr\xc3\xb6\xc3\x9f" "e.",
      "La volpe marr\xc3\xb2n salta sopra il cane pigro. Perch\xc3\xa9 no?",
      "El r\xc3\xa1pido zorro marr\xc3\xb3n salta sobre el perro perezoso. \xc2\xbf" "Qu\xc3\xa9?",
      "Szybki br\xc4\x85zowy lis przeskakuje nad leniwym psem. \xc5\xbb\xc3\xb3\xc5\x82w.",
      "P\xc5\x99\xc3\xad\xc5\xa1" "ern\xc4\x9b \xc5\xbelu\xc5\xa5ou\xc4\x8dk\xc3\xbd k\xc5\xaf\xc5\x88 \xc3\xba\xc5\x99" "ed",
      "the the the the the, and and and; of of of.",
      "emoji \xf0\x9f\x98\x80\xf0\x9f\x8e\x89 and CJK \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e!!! ... ---",
  };
  return docs;
}

std::vector<std::string> edge_cases() {
  return {"", " ", "   ", "\n", "\n\n", "\t\t", " \t ", "\r\n", " \n x", "a  b", "  lead", "trail  ", "0123456789",
          " 42 7", "!!!???...", " ... !", "a,b;c", "\x01\x02\x7f \x1b[0m", std::string("nul\0in", 6),
          "caf\xc3\xa9 \xc2\xa0nbsp", "<eos> literal", "x<pad>y", std::string(200, ' ') + "z", "the   fox"};
}

std::string temp_dir() { return ht::test::make_temp_dir("ht_hf_tokenizer_test_"); }

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

// Runs tests/python/hf_tokenizer_check.py (tokenizers and transformers) on `tok`; skips without the venv.
void python_check(const Tokenizer& tok, const std::vector<std::string>& texts) {
  const char* src = std::getenv("HPCTRAIN_SOURCE_DIR");
  if (src == nullptr) GTEST_SKIP() << "HPCTRAIN_SOURCE_DIR unset (ctest sets it)";
  const std::string d = temp_dir();
  std::ofstream(d + "/tokenizer.json") << to_hf_tokenizer_json(tok);
  std::ofstream(d + "/tokenizer_config.json") << to_hf_tokenizer_config_json(1024);
  {
    std::ofstream jl(d + "/ids.jsonl");
    for (const auto& t : texts) jl << nlohmann::json{{"text", t}, {"ids", tok.encode(t)}}.dump() << "\n";
    const std::string invalid = "bytes \xff\xfe and a cut \xe2\x82";  // not UTF-8: decode-only check
    jl << nlohmann::json{{"text_hex", hex(invalid)}, {"ids", tok.encode(invalid)}}.dump() << "\n";
  }
  const std::string cmd = "bash " + std::string(src) + "/tests/python/with_venv.sh " + src +
                          "/tests/python/hf_tokenizer_check.py " + d + "/tokenizer.json " + d +
                          "/ids.jsonl --transformers";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "Python venv missing (scripts/setup-python.sh)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << cmd;
}

std::vector<std::string> all_texts() {
  std::vector<std::string> t = corpus();
  for (auto& e : edge_cases()) t.push_back(e);
  return t;
}

}  // namespace

TEST(HfTokenizer, ByteCharactersAreGpt2s) {
  EXPECT_EQ(hf_byte_char('a'), "a");
  EXPECT_EQ(hf_byte_char('!'), "!");
  EXPECT_EQ(hf_byte_char(' '), "\xc4\xa0");     // U+0120 'Ġ'
  EXPECT_EQ(hf_byte_char('\n'), "\xc4\x8a");    // U+010A 'Ċ'
  EXPECT_EQ(hf_byte_char(0x00), "\xc4\x80");    // U+0100
  EXPECT_EQ(hf_byte_char(0x7f), "\xc4\xa1");    // U+0121
  EXPECT_EQ(hf_byte_char(0xad), "\xc5\x83");    // U+0143, the last of the 68 remapped bytes
  EXPECT_EQ(hf_byte_char(0xe9), "\xc3\xa9");    // printable Latin-1 stands for itself
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string c = hf_byte_char(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second) << b;
    EXPECT_EQ(c.find(' '), std::string::npos) << b;  // merges are written "left right"
  }
}

TEST(HfTokenizer, ByteTokenizerJson) {
  const auto j = nlohmann::json::parse(to_hf_tokenizer_json(Tokenizer::bytes()));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["vocab"].size(), 258u);
  EXPECT_TRUE(j["model"]["merges"].empty());
  EXPECT_EQ(j["model"]["vocab"]["\xc4\xa0"], 32);
  EXPECT_EQ(j["model"]["vocab"]["<pad>"], 256);
  EXPECT_EQ(j["model"]["vocab"]["<eos>"], 257);
  ASSERT_EQ(j["added_tokens"].size(), 2u);
  EXPECT_EQ(j["added_tokens"][1]["content"], "<eos>");
  EXPECT_EQ(j["added_tokens"][1]["id"], 257);
  EXPECT_TRUE(j["added_tokens"][1]["special"].get<bool>());
  const auto& pre = j["pre_tokenizer"]["pretokenizers"];
  EXPECT_EQ(pre[0]["type"], "Split");
  EXPECT_EQ(pre[0]["pattern"]["Regex"], kHfSplitRegex);
  EXPECT_EQ(pre[0]["behavior"], "Isolated");
  EXPECT_EQ(pre[1]["type"], "ByteLevel");
  EXPECT_FALSE(pre[1]["use_regex"].get<bool>());
  EXPECT_FALSE(pre[1]["add_prefix_space"].get<bool>());
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_TRUE(j["post_processor"].is_null());
}

TEST(HfTokenizer, BpeVocabularyAndMerges) {
  const Tokenizer tok = Tokenizer::train_bpe(corpus(), 400);
  const auto j = nlohmann::json::parse(to_hf_tokenizer_json(tok));
  const auto& vocab = j["model"]["vocab"];
  ASSERT_EQ(vocab.size(), static_cast<size_t>(tok.vocab_size()));
  std::set<int64_t> ids;
  for (const auto& [piece, id] : vocab.items()) ids.insert(id.get<int64_t>());
  EXPECT_EQ(ids.size(), vocab.size());
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), tok.vocab_size() - 1);
  ASSERT_EQ(j["model"]["merges"].size(), tok.merges().size());
  // Each merge i reads "piece(a) piece(b)" and its concatenation is the vocabulary entry 258 + i.
  for (size_t i = 0; i < tok.merges().size(); ++i) {
    const std::string m = j["model"]["merges"][i];
    const auto space = m.find(' ');
    ASSERT_NE(space, std::string::npos) << m;
    EXPECT_EQ(vocab[m.substr(0, space) + m.substr(space + 1)].get<int64_t>(), kByteVocab + static_cast<int64_t>(i)) << m;
    EXPECT_EQ(vocab[m.substr(0, space)].get<int64_t>(), tok.merges()[i].first) << m;
  }
}

TEST(HfTokenizer, RefusesMergesThatShareASpelling) {
  // "abc" twice: (ab)c and a(bc).
  const Tokenizer tok = Tokenizer::from_merges({{'a', 'b'}, {258, 'c'}, {'b', 'c'}, {'a', 260}});
  try {
    to_hf_tokenizer_json(tok);
    ADD_FAILURE() << "exported";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ht::ExitCode::kData);
    const std::string what = e.what();
    EXPECT_NE(what.find("BPE merge 3 (97, 260)"), std::string::npos) << what;
    EXPECT_NE(what.find("BPE merge 1 (258, 99)"), std::string::npos) << what;
  }
}

TEST(HfTokenizer, ConfigForTransformers) {
  const auto j = nlohmann::json::parse(to_hf_tokenizer_config_json(512));
  EXPECT_EQ(j["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(j["eos_token"], "<eos>");
  EXPECT_EQ(j["pad_token"], "<pad>");
  EXPECT_EQ(j["model_max_length"], 512);
  EXPECT_TRUE(j["split_special_tokens"].get<bool>());
}

TEST(HfTokenizerPython, ByteTokenizerSameIds) { python_check(Tokenizer::bytes(), all_texts()); }

TEST(HfTokenizerPython, BpeSameIds) {
  std::vector<std::string> docs;  // three copies: every pair occurs at least 3 times, many merges
  for (int i = 0; i < 3; ++i) docs.insert(docs.end(), corpus().begin(), corpus().end());
  const Tokenizer tok = Tokenizer::train_bpe(docs, 600);
  EXPECT_GT(tok.merges().size(), 200u);  // whole words of the corpus become single tokens
  python_check(tok, all_texts());
}
