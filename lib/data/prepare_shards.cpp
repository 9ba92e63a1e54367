// `hpctrain prepare` under mpirun: one shard per rank, the concatenation equal to the single file.
// What makes it equal: a document never spans files, documents are numbered globally in input
// order (the offset of a rank's first document comes from an allgather), the train/val rule is
// a function of (seed, global document index, total count) only, and every shard shares one
// tokenizer. Tokens of /train and /val are the documents' tokens in order (classification: one row
// per document, labelled with its --input's index), so concatenating the shards' splits gives the
// single file's splits.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "comm/agree.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/prepare.h"
#include "data/prepare_steps.h"
#include "data/text_source.h"

namespace ht::data {
namespace {

// Every input file in the order prepare reads them (inputs in order, a directory's files sorted),
// with the index of the --input each came from (with --labels-from-dirs: its label).
struct CorpusFiles {
  std::vector<std::string> paths;
  std::vector<size_t> input;
};

CorpusFiles corpus_files(const std::vector<LabelInput>& inputs) {
  CorpusFiles files;
  for (size_t i = 0; i < inputs.size(); ++i)
    for (auto& f : input_files(inputs[i].path)) {
      files.paths.push_back(std::move(f));
      files.input.push_back(i);
    }
  return files;
}

// first[r] .. first[r+1]: the files of rank r, contiguous, about total/R bytes each, >= 1 file each.
std::vector<size_t> split_files(const std::vector<std::string>& files, int ranks) {
  std::vector<uint64_t> before(files.size() + 1, 0);  // bytes of the files before file i
  for (size_t i = 0; i < files.size(); ++i) {
    struct stat st {};
    HT_REQUIRE(::stat(files[i].c_str(), &st) == 0, ExitCode::kData, "{}: cannot stat: {}", files[i],
               std::strerror(errno));
    before[i + 1] = before[i] + static_cast<uint64_t>(st.st_size);
  }
  const size_t n = files.size(), R = static_cast<size_t>(ranks);
  std::vector<size_t> first(R + 1, n);
  first[0] = 0;
  for (size_t k = 1; k < R; ++k) {
    const uint64_t target = before[n] / R * k + before[n] % R * k / R;
    size_t i = static_cast<size_t>(std::lower_bound(before.begin(), before.end(), target) - before.begin());
    first[k] = std::clamp(i, first[k - 1] + 1, n - (R - k));
  }
  return first;
}

// Files [begin, end); a document's label is its input's index when `labels`; docs_per_file[i]
// (when given) receives file i's document count.
Corpus read_files(const CorpusFiles& files, size_t begin, size_t end, bool labels,
                  std::vector<int64_t>* docs_per_file = nullptr) {
  Corpus c;
  for (size_t i = begin; i < end; ++i) {
    auto docs = file_documents(files.paths[i], &c.bytes);
    if (docs_per_file) (*docs_per_file)[i] = static_cast<int64_t>(docs.size());
    if (labels) c.labels.insert(c.labels.end(), docs.size(), static_cast<int32_t>(files.input[i]));
    c.docs.insert(c.docs.end(), std::make_move_iterator(docs.begin()), std::make_move_iterator(docs.end()));
  }
  return c;
}

// The merges as bytes for a broadcast: each pair as two uint32 in this machine's byte order (all
// ranks of one job run the same binary on the same architecture).
std::string pack_merges(const Tokenizer& t) {
  std::string s;
  s.reserve(t.merges().size() * 2 * sizeof(uint32_t));
  for (const auto& [left, right] : t.merges())
    for (const uint32_t id : {left, right}) s.append(reinterpret_cast<const char*>(&id), sizeof id);
  return s;
}

Tokenizer unpack_merges(const std::string& s) {
  std::vector<Tokenizer::Merge> m(s.size() / (2 * sizeof(uint32_t)));
  for (size_t i = 0; i < m.size(); ++i) {
    uint32_t ids[2];
    std::memcpy(ids, s.data() + i * sizeof ids, sizeof ids);
    m[i] = {ids[0], ids[1]};
  }
  return Tokenizer::from_merges(std::move(m));
}

// As the single-file prepare: every --input must give documents (an empty one is a mistake).
void check_documents_per_input(const PrepareOptions& o, const std::vector<LabelInput>& inputs,
                               const CorpusFiles& files, const std::vector<int64_t>& docs_per_file, bool log) {
  std::vector<int64_t> docs_per_input(o.inputs.size(), 0);
  for (size_t i = 0; i < docs_per_file.size(); ++i) docs_per_input[files.input[i]] += docs_per_file[i];
  for (size_t i = 0; i < inputs.size(); ++i) {
    HT_REQUIRE(docs_per_input[i] > 0, ExitCode::kData, "{}: no documents found (empty files or directory?)",
               inputs[i].path);
    if (o.labels_from_dirs && log)
      HT_INFO("prepare: label {} '{}': {} documents from {}", i, inputs[i].label, docs_per_input[i], inputs[i].path);
  }
}

// Collective: this rank's shard written to a temporary name, then every shard renamed only once
// all were written (a failed write leaves no partial set of shards).
PrepareSummary write_shard(const PrepareOptions& o, const Corpus& mine, const Tokenizer& tok,
                           const std::vector<bool>& val, comm::Communicator& comm) {
  const std::string out = shard_path(o.output, comm.rank(), comm.size());
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  PrepareSummary s;
  try {
    comm::run_agreed(comm, [&] {
      // A shard must be readable alone (DatasetFile::open needs training tokens).
      HT_REQUIRE(std::count(val.begin(), val.end(), false) > 0, ExitCode::kData,
                 "prepare: shard {} would hold no training documents ({} document(s) in its input files); use fewer "
                 "ranks", out, val.size());
      s = write_dataset(o, tmp, mine, tok, val);
    });
    comm::run_agreed(comm, [&] { commit_dataset(tmp, out); });
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  return s;
}

}  // namespace

std::string shard_path(const std::string& output, int rank, int size) {
  const bool h5 = output.size() > 3 && output.compare(output.size() - 3, 3, ".h5") == 0;
  return fmt::format("{}-{:05d}-of-{:05d}.h5", h5 ? output.substr(0, output.size() - 3) : output, rank, size);
}

PrepareSummary prepare_shards(const PrepareOptions& o, comm::Communicator& comm) {
  const int R = comm.size(), r = comm.rank();
  const bool bpe = o.tokenizer == TokenizerKind::kBpe;
  Stopwatch clock;
  Corpus mine;
  std::string merges;  // rank 0's BPE vocabulary, packed
  std::vector<LabelInput> inputs;
  CorpusFiles files;
  std::vector<int64_t> docs_per_file;  // this rank's files filled in, then summed over ranks
  comm::run_agreed(comm, [&] {
    validate_prepare(o);
    inputs = resolve_inputs(o);
    files = corpus_files(inputs);
    const size_t num_files = files.paths.size();
    HT_REQUIRE(num_files >= static_cast<size_t>(R), ExitCode::kUsage,
               "prepare: {} input file(s) cannot make {} shards (each rank writes whole files); run on at most {} "
               "ranks", num_files, R, num_files);
    const auto first = split_files(files.paths, R);
    docs_per_file.assign(num_files, 0);
    mine = read_files(files, first[r], first[r + 1], o.labels_from_dirs, &docs_per_file);
    // Every shard carries every label name, also those none of its documents has.
    if (o.labels_from_dirs)
      for (const auto& in : inputs) mine.label_names.push_back(in.label);
  });
  comm.allreduce(docs_per_file.data(), docs_per_file.size(), comm::DType::kI64, comm::ReduceOp::kSum);
  comm::run_agreed(comm, [&] {
    check_documents_per_input(o, inputs, files, docs_per_file, r == 0);
    // One vocabulary for all shards, trained as the single-file prepare trains it.
    if (bpe && r == 0) {
      const Corpus all = read_files(files, 0, files.paths.size(), false);
      merges = pack_merges(make_tokenizer(o, all.docs, all.bytes));
    }
  });
  std::vector<int64_t> counts(static_cast<size_t>(R));
  const auto n = static_cast<int64_t>(mine.docs.size());
  comm.allgather(&n, counts.data(), sizeof n);
  if (bpe) merges = comm.broadcast_string(merges, 0);
  const int64_t total_bytes = comm.allreduce_sum(static_cast<int64_t>(mine.bytes));
  const int64_t offset = std::accumulate(counts.begin(), counts.begin() + r, int64_t{0});
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});

  const Tokenizer tok = bpe ? unpack_merges(merges) : Tokenizer::bytes();
  const auto all = assign_validation(total, o.val_fraction, o.seed);
  const PrepareSummary s =
      write_shard(o, mine, tok, std::vector<bool>(all.begin() + offset, all.begin() + offset + n), comm);
  HT_INFO("prepare: wrote {} shards {} ({}, {} tokenizer, vocab {}, {} documents, {:.1f} MiB of text) in {:.1f}s", R,
          shard_path(o.output, 0, R), config::name_of(s.task), config::name_of(o.tokenizer), s.vocab_size, total,
          total_bytes / 1048576.0, clock.seconds());
  return s;
}

}  // namespace ht::data
