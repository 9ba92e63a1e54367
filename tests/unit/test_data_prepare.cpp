// Tokenizers, document splitting and `prepare` round trips on Debian's fortune files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "data/chunk_reader.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/text_source.h"
#include "data/tokenizer.h"
#include "unit/test_data_fixtures.h"

using namespace ht::data;

namespace {

const std::string kFortunes = "/usr/share/games/fortunes";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A small corpus directory: two English fortune files and one plain-text file.
std::string corpus_dir() {
  static const std::string d = [] {
    const std::string dir = fixtures::make_temp_dir();
    std::ofstream(dir + "/a") << slurp(kFortunes + "/fortunes");
    std::ofstream(dir + "/b") << slurp(kFortunes + "/pets");
    std::ofstream(dir + "/c.txt") << "First paragraph,\ntwo lines.\n\n\n  \nSecond paragraph.\n";
    std::ofstream(dir + "/a.dat") << "index file, skipped";
    ::symlink((kFortunes + "/zippy").c_str(), (dir + "/link").c_str());  // symlinks skipped in directories
    return dir;
  }();
  return d;
}

std::vector<int64_t> read_all(const std::string& path, const std::string& name) {
  auto r = Dataset::open(path)->reader(name, size_t{64} << 20);
  std::vector<int64_t> out(static_cast<size_t>(r->rows() * r->row_elems()));
  r->read_rows(0, r->rows(), r->row_elems(), out.data());
  return out;
}

// The documents of a split, decoded from tokens + doc_offsets (the trailing <eos> dropped).
std::vector<std::string> decode_split(const std::string& path, const std::string& split, const Tokenizer& tok) {
  const auto tokens = read_all(path, split_dataset(split, "tokens"));
  const auto offsets = read_all(path, split_dataset(split, "doc_offsets"));
  std::vector<std::string> docs;
  for (size_t d = 0; d + 1 < offsets.size(); ++d) {
    EXPECT_EQ(tokens[offsets[d + 1] - 1], kEosId);
    docs.push_back(tok.decode(std::vector<int64_t>(tokens.begin() + offsets[d], tokens.begin() + offsets[d + 1] - 1)));
  }
  return docs;
}

}  // namespace

TEST(DataText, FortunesParagraphsAndDirectories) {
  EXPECT_EQ(split_fortunes("one\nline\n%\ntwo\n%\n\n%\nthree"), (std::vector<std::string>{"one\nline", "two", "three"}));
  EXPECT_EQ(split_paragraphs("p1\nl2\n\n \np2\n"), (std::vector<std::string>{"p1\nl2", "p2"}));
  const auto files = input_files(corpus_dir());
  ASSERT_EQ(files.size(), 3u);  // a, b, c.txt: not a.dat, not the symlink
  EXPECT_EQ(files[2], corpus_dir() + "/c.txt");
  const auto docs = read_documents(corpus_dir() + "/c.txt");
  EXPECT_EQ(docs, (std::vector<std::string>{"First paragraph,\ntwo lines.", "Second paragraph."}));
  EXPECT_EQ(parse_label_input("/usr/share/games/fortunes/de/").label, "de");
  EXPECT_EQ(parse_label_input("en=/usr/share/games/fortunes").label, "en");
  EXPECT_THROW(read_documents(corpus_dir() + "/missing"), ht::Error);
}

TEST(DataTokenizer, ByteRoundTripOfAnyBytes) {
  const Tokenizer t = Tokenizer::bytes();
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  const std::string text = slurp(kFortunes + "/de/anekdoten") + all;
  const auto ids = t.encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(t.vocab_size(), 258);
}

TEST(DataTokenizer, BpeRoundTripDeterministicAndCompressing) {
  const auto docs = read_documents(kFortunes + "/fortunes");
  const Tokenizer a = Tokenizer::train_bpe(docs, 600);
  const Tokenizer b = Tokenizer::train_bpe(docs, 600);
  EXPECT_EQ(a.merges(), b.merges());
  EXPECT_EQ(a.vocab_size(), 600);
  std::string joined;
  for (const auto& d : docs) joined += d + "\n";
  const auto ids = a.encode(joined);
  EXPECT_EQ(a.decode(ids), joined);
  EXPECT_LT(ids.size() * 2, joined.size());  // at least 2 bytes per token on its training text
  // Unseen text, other languages, raw bytes: still lossless.
  std::string other = slurp(kFortunes + "/de/anekdoten");
  other += std::string("\x00\xff\xfe tail", 8);
  EXPECT_EQ(a.decode(a.encode(other)), other);
  std::string words;
  for (const auto& w : split_words(other)) words += w;
  EXPECT_EQ(words, other);
}

TEST(DataPrepare, ByteLmRoundTripThroughTheFile) {
  PrepareOptions o;
  o.inputs = {corpus_dir()};
  o.output = fixtures::make_temp_dir() + "/sub/lm.h5";  // parent directory created
  o.val_fraction = 0.1;
  const PrepareSummary s = prepare(o);
  const DatasetMeta m = read_meta(o.output);
  EXPECT_EQ(m.task, ht::config::Task::kCausalLm);
  EXPECT_EQ(m.vocab_size, 258);
  EXPECT_EQ(m.num_train_tokens, s.train_tokens);
  EXPECT_GT(s.val_docs, 0);
  // Train and val documents, interleaved back in document order, are exactly the inputs.
  std::vector<std::string> expected;
  for (const auto& f : input_files(corpus_dir())) {
    auto d = read_documents(f);
    expected.insert(expected.end(), d.begin(), d.end());
  }
  const auto val = assign_validation(static_cast<int64_t>(expected.size()), 0.1, o.seed);
  const Tokenizer tok = Tokenizer::load(o.output);
  auto train_docs = decode_split(o.output, "train", tok), val_docs = decode_split(o.output, "val", tok);
  size_t ti = 0, vi = 0;
  for (size_t d = 0; d < expected.size(); ++d) {
    const std::string& got = val[d] ? val_docs.at(vi++) : train_docs.at(ti++);
    EXPECT_EQ(got, expected[d]) << "document " << d;
  }
  EXPECT_EQ(ti, train_docs.size());
  EXPECT_EQ(vi, val_docs.size());
  struct stat st {};
  EXPECT_NE(::stat((o.output + ".tmp-" + std::to_string(::getpid())).c_str(), &st), 0);  // no temp file left
}

TEST(DataPrepare, BpeRoundTripAndStoredMerges) {
  PrepareOptions o;
  o.inputs = {kFortunes + "/fortunes"};
  o.output = fixtures::make_temp_dir() + "/bpe.h5";
  o.tokenizer = TokenizerKind::kBpe;
  o.vocab_size = 500;
  prepare(o);
  const DatasetMeta m = read_meta(o.output);
  EXPECT_EQ(m.tokenizer, TokenizerKind::kBpe);
  EXPECT_EQ(m.vocab_size, 500);
  const Tokenizer tok = Tokenizer::load(o.output);
  EXPECT_EQ(tok.vocab_size(), 500);
  auto docs = decode_split(o.output, "train", tok);
  auto val = decode_split(o.output, "val", tok);
  docs.insert(docs.end(), val.begin(), val.end());
  auto expected = read_documents(o.inputs[0]);
  std::sort(docs.begin(), docs.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(docs, expected);
  EXPECT_NE(describe(*Dataset::open(o.output)).find("/tokenizer/merges"), std::string::npos);
}

TEST(DataPrepare, ClassificationFromLabelDirectories) {
  PrepareOptions o;
  o.inputs = {kFortunes + "/de", "en=" + kFortunes + "/fortunes"};
  o.output = fixtures::make_temp_dir() + "/cls.h5";
  o.labels_from_dirs = true;
  o.seq_len = 64;
  const PrepareSummary s = prepare(o);
  const DatasetMeta m = read_meta(o.output);
  EXPECT_EQ(m.task, ht::config::Task::kClassification);
  EXPECT_EQ(m.label_names, (std::vector<std::string>{"de", "en"}));
  EXPECT_EQ(m.seq_len, 64);
  EXPECT_EQ(m.num_train_rows + m.num_val_rows, s.train_docs + s.val_docs);
  const auto labels = read_all(o.output, "/train/labels");
  EXPECT_EQ(std::count(labels.begin(), labels.end(), 0) + std::count(labels.begin(), labels.end(), 1),
            static_cast<long>(labels.size()));
  EXPECT_GT(std::count(labels.begin(), labels.end(), 1), 0);
  EXPECT_NE(describe(*Dataset::open(o.output)).find("labels: de en"), std::string::npos);
}

TEST(DataPrepare, DeterministicAndValidatesOptions) {
  PrepareOptions o;
  o.inputs = {kFortunes + "/pets"};
  o.output = fixtures::make_temp_dir() + "/a.h5";
  prepare(o);
  const std::string first = o.output;
  o.output += ".again";
  prepare(o);
  EXPECT_EQ(read_all(first, "/train/tokens"), read_all(o.output, "/train/tokens"));
  EXPECT_EQ(read_all(first, "/val/tokens"), read_all(o.output, "/val/tokens"));
  o.vocab_size = 300;  // byte tokenizer with a vocab size
  EXPECT_THROW(prepare(o), ht::Error);
  o.vocab_size = 0;
  o.inputs = {"/nonexistent/input"};
  EXPECT_THROW(prepare(o), ht::Error);
  const auto v = assign_validation(2, 0.01, 1);
  EXPECT_EQ(std::count(v.begin(), v.end(), true), 1);  // val non-empty when possible, train too
}
