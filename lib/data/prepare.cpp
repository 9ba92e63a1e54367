#include "data/prepare.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/prepare_steps.h"
#include "data/sampler.h"
#include "data/text_source.h"
#include "data/tokenizer.h"
#include "io/h5.h"

namespace ht::data {
namespace {

constexpr io::Size kTokenChunk = 32768;  // 64 KiB of uint16: a checksum failure names a small range

Corpus read_corpus(const PrepareOptions& o) {
  Corpus c;
  const auto inputs = resolve_inputs(o);
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto docs = read_documents(inputs[i].path, &c.bytes);
    if (o.labels_from_dirs) {
      c.labels.insert(c.labels.end(), docs.size(), static_cast<int32_t>(i));
      c.label_names.push_back(inputs[i].label);
      HT_INFO("prepare: label {} '{}': {} documents from {}", i, inputs[i].label, docs.size(), inputs[i].path);
    }
    c.docs.insert(c.docs.end(), std::make_move_iterator(docs.begin()), std::make_move_iterator(docs.end()));
  }
  HT_INFO("prepare: {} documents, {:.1f} MiB of text from {} input(s)", c.docs.size(), c.bytes / 1048576.0,
          o.inputs.size());
  return c;
}

template <typename T>
void write_ids(io::Id loc, const std::string& name, const std::vector<uint32_t>& ids, std::vector<io::Size> dims,
               io::Size chunk_rows) {
  std::vector<T> narrow(ids.begin(), ids.end());
  io::write(loc, name, narrow, std::move(dims), chunk_rows);
}

void write_token_ids(io::Id loc, const std::string& name, const std::vector<uint32_t>& ids, int64_t vocab,
                     std::vector<io::Size> dims, io::Size chunk_rows) {
  if (vocab > 65535) io::write(loc, name, ids, std::move(dims), chunk_rows);
  else write_ids<uint16_t>(loc, name, ids, std::move(dims), chunk_rows);
}

// Progress lines every 10% on inputs above 4 MiB (BPE training: above 1 MiB).
struct Progress {
  size_t total;
  bool on;
  size_t next_mark = 1;
  void update(size_t done) {
    if (!on || total == 0) return;
    while (done * 10 >= next_mark * total && next_mark <= 10) {
      HT_INFO("prepare: encoded {}% ({} / {} documents)", next_mark * 10, done, total);
      ++next_mark;
    }
  }
};

void write_lm(io::Id f, const Corpus& c, const Tokenizer& tok, const std::vector<bool>& val, PrepareSummary& s,
              bool progress) {
  std::vector<uint32_t> tokens[2];
  std::vector<uint64_t> offsets[2] = {{0}, {0}};
  Progress bar{c.docs.size(), progress};
  for (size_t d = 0; d < c.docs.size(); ++d) {
    const int k = val[d] ? 1 : 0;
    auto ids = tok.encode(c.docs[d]);
    tokens[k].insert(tokens[k].end(), ids.begin(), ids.end());
    tokens[k].push_back(static_cast<uint32_t>(kEosId));
    offsets[k].push_back(tokens[k].size());
    bar.update(d + 1);
  }
  const char* names[2] = {"train", "val"};
  for (int k = 0; k < 2; ++k) {
    write_token_ids(f, split_dataset(names[k], "tokens"), tokens[k], tok.vocab_size(), {}, kTokenChunk);
    io::write(f, split_dataset(names[k], "doc_offsets"), offsets[k], {}, 8192);
  }
  s.train_tokens = static_cast<int64_t>(tokens[0].size());
  s.val_tokens = static_cast<int64_t>(tokens[1].size());
  io::set_attr(f, "num_tokens", s.train_tokens + s.val_tokens);
}

void write_classification(io::Id f, const Corpus& c, const Tokenizer& tok, const std::vector<bool>& val, int64_t seq_len,
                          PrepareSummary& s, bool progress) {
  std::vector<uint32_t> rows[2];
  std::vector<int32_t> labels[2];
  Progress bar{c.docs.size(), progress};
  for (size_t d = 0; d < c.docs.size(); ++d) {
    const int k = val[d] ? 1 : 0;
    auto ids = tok.encode(c.docs[d]);
    ids.resize(static_cast<size_t>(seq_len), static_cast<uint32_t>(kPadId));  // truncate or pad
    rows[k].insert(rows[k].end(), ids.begin(), ids.end());
    labels[k].push_back(c.labels[d]);
    bar.update(d + 1);
  }
  const io::Size chunk_rows = std::max<io::Size>(1, 65536 / static_cast<io::Size>(seq_len * 2));
  const char* names[2] = {"train", "val"};
  for (int k = 0; k < 2; ++k) {
    const io::Size n = labels[k].size();
    write_token_ids(f, split_dataset(names[k], "input_ids"), rows[k], tok.vocab_size(),
                    {n, static_cast<io::Size>(seq_len)}, chunk_rows);
    io::write(f, split_dataset(names[k], "labels"), labels[k], {}, 16384);
  }
  io::set_attr(f, "seq_len", seq_len);
  io::set_attr(f, "label_names", c.label_names);
  s.labels = c.label_names;
  s.train_tokens = static_cast<int64_t>(rows[0].size());
  s.val_tokens = static_cast<int64_t>(rows[1].size());
}

void write_root(const io::File& file, const PrepareOptions& o, const Tokenizer& tok, config::Task task) {
  const io::Id f = file.id();
  io::set_attr(f, "format", std::string(kFormatName));
  io::set_attr(f, "format_version", kFormatVersion);
  io::set_attr(f, "task", std::string(config::name_of(task)));
  io::set_attr(f, "vocab_size", tok.vocab_size());
  io::set_attr(f, "tokenizer", std::string(config::name_of(tok.kind())));
  io::set_attr(f, "pad_id", kPadId);
  io::set_attr(f, "eos_id", kEosId);
  io::set_attr(f, "seed", o.seed);
  io::set_attr(f, "val_fraction", o.val_fraction);
  io::set_attr(f, "created_by", std::string("hpctrain prepare ") + HPCTRAIN_VERSION);
  tok.save(file);
}

void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) { ::fsync(fd); ::close(fd); }
}

// Writing the output over one of the inputs would destroy the corpus (the rename replaces it).
void refuse_output_among_inputs(const PrepareOptions& o) {
  struct stat out {};
  if (::stat(o.output.c_str(), &out) != 0) return;  // a file that does not exist is no input
  for (const auto& [label, path] : resolve_inputs(o)) {
    struct stat in {};
    if (::stat(path.c_str(), &in) != 0) continue;  // reported as a missing input later
    for (const auto& file : input_files(path)) {
      struct stat f {};
      HT_REQUIRE(!(::stat(file.c_str(), &f) == 0 && f.st_dev == out.st_dev && f.st_ino == out.st_ino), ExitCode::kUsage,
                 "prepare: --output {} is also an input ({}); writing it would destroy the input: choose another "
                 "output path",
                 o.output, file);
    }
  }
}

}  // namespace

std::vector<LabelInput> resolve_inputs(const PrepareOptions& o) {
  std::vector<LabelInput> inputs;
  for (const auto& spec : o.inputs) {
    if (!o.labels_from_dirs) { inputs.push_back({"", spec}); continue; }
    LabelInput in = parse_label_input(spec);
    for (const auto& seen : inputs)
      HT_REQUIRE(seen.label != in.label, ExitCode::kUsage, "label '{}' given twice (use NAME=PATH to rename)",
                 in.label);
    inputs.push_back(std::move(in));
  }
  return inputs;
}

void validate_prepare(const PrepareOptions& o) {
  HT_REQUIRE(!o.inputs.empty(), ExitCode::kUsage, "prepare: give at least one --input");
  HT_REQUIRE(!o.output.empty(), ExitCode::kUsage, "prepare: --output is required");
  HT_REQUIRE(o.tokenizer == TokenizerKind::kBpe || o.vocab_size == 0 || o.vocab_size == kByteVocab, ExitCode::kUsage,
             "prepare: the byte tokenizer has vocab_size {}; --vocab-size {} needs --tokenizer bpe", kByteVocab,
             o.vocab_size);
  HT_REQUIRE(o.val_fraction >= 0 && o.val_fraction < 1, ExitCode::kUsage,
             "prepare: --val-fraction {} must be in [0, 1)", o.val_fraction);
  HT_REQUIRE(!o.labels_from_dirs || o.inputs.size() >= 2, ExitCode::kUsage,
             "prepare: --labels-from-dirs needs one --input per label (at least 2)");
  HT_REQUIRE(o.seq_len > 0, ExitCode::kUsage, "prepare: --seq-len {} must be positive", o.seq_len);
  refuse_output_among_inputs(o);
}

std::vector<bool> assign_validation(int64_t num_docs, double val_fraction, int64_t seed) {
  std::vector<bool> val(static_cast<size_t>(num_docs), false);
  int64_t count = 0, best = -1;
  double best_u = 2;
  for (int64_t d = 0; d < num_docs; ++d) {
    const double u = static_cast<double>(mix_seed(static_cast<uint64_t>(seed), static_cast<uint64_t>(d)) >> 11) *
                     0x1.0p-53;
    if (u < val_fraction) { val[static_cast<size_t>(d)] = true; ++count; }
    if (u < best_u) { best_u = u; best = d; }
  }
  if (count == 0 && val_fraction > 0 && num_docs >= 2) val[static_cast<size_t>(best)] = true;
  if (count == num_docs && num_docs > 0) val[static_cast<size_t>(best)] = false;  // keep train non-empty
  return val;
}

Tokenizer make_tokenizer(const PrepareOptions& o, const std::vector<std::string>& docs, uint64_t bytes) {
  if (o.tokenizer != TokenizerKind::kBpe) return Tokenizer::bytes();
  return Tokenizer::train_bpe(docs, o.vocab_size ? o.vocab_size : 1024, o.progress && bytes > (1u << 20));
}

PrepareSummary write_dataset(const PrepareOptions& o, const std::string& tmp, const Corpus& c, const Tokenizer& tok,
                             const std::vector<bool>& val) {
  PrepareSummary s;
  s.input_bytes = c.bytes;
  s.task = o.labels_from_dirs ? config::Task::kClassification : config::Task::kCausalLm;
  s.vocab_size = tok.vocab_size();
  for (bool v : val) ++(v ? s.val_docs : s.train_docs);
  const bool progress = o.progress && c.bytes > (4u << 20);
  fs::make_dirs(fs::parent_dir(tmp));  // not std::filesystem: see core/fs.h
  try {
    io::File file = io::File::create(tmp);
    write_root(file, o, tok, s.task);
    if (o.labels_from_dirs) write_classification(file.id(), c, tok, val, o.seq_len, s, progress);
    else write_lm(file.id(), c, tok, val, s, progress);
    file.close();
    sync_path(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  return s;
}

void commit_dataset(const std::string& tmp, const std::string& output) {
  if (std::rename(tmp.c_str(), output.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    HT_FAIL(ExitCode::kData, "{}: cannot rename {} to it: {}", output, tmp, std::strerror(err));
  }
  const std::string parent = fs::parent_dir(output);
  sync_path(parent.empty() ? "." : parent);
}

PrepareSummary prepare(const PrepareOptions& o) {
  validate_prepare(o);
  Stopwatch clock;
  const Corpus corpus = read_corpus(o);
  const Tokenizer tok = make_tokenizer(o, corpus.docs, corpus.bytes);
  const auto val = assign_validation(static_cast<int64_t>(corpus.docs.size()), o.val_fraction, o.seed);
  const std::string tmp = o.output + ".tmp-" + std::to_string(::getpid());
  const PrepareSummary s = write_dataset(o, tmp, corpus, tok, val);
  commit_dataset(tmp, o.output);
  HT_INFO("prepare: wrote {} ({}, {} tokenizer, vocab {}): train {} docs / {} tokens, val {} docs / {} tokens in {:.1f}s",
          o.output, config::name_of(s.task), config::name_of(tok.kind()), s.vocab_size, s.train_docs, s.train_tokens,
          s.val_docs, s.val_tokens, clock.seconds());
  return s;
}

}  // namespace ht::data
