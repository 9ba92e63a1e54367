// `hpctrain prepare` under mpirun: one shard per rank, the concatenation equal to the single file.
// What makes it equal: a document never spans files, documents are numbered globally in input
// order (the offset of a rank's first document comes from an allgather), the train/val rule is
// a function of (seed, global document index, total count) only, and every shard shares one
// tokenizer. Tokens of /train and /val are the documents' tokens in order, so concatenating the
// shards' splits gives the single file's splits.
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

// Every input file in the order prepare reads them (inputs in order, a directory's files sorted).
std::vector<std::string> corpus_files(const PrepareOptions& o) {
  std::vector<std::string> files;
  for (const auto& in : o.inputs)
    for (auto& f : input_files(in)) files.push_back(std::move(f));
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

Corpus read_files(const std::vector<std::string>& files, size_t begin, size_t end) {
  Corpus c;
  for (size_t i = begin; i < end; ++i) {
    auto docs = file_documents(files[i], &c.bytes);
    c.docs.insert(c.docs.end(), std::make_move_iterator(docs.begin()), std::make_move_iterator(docs.end()));
  }
  return c;
}

std::string pack_merges(const Tokenizer& t) {
  std::string s(t.merges().size() * sizeof(Tokenizer::Merge), '\0');
  if (!s.empty()) std::memcpy(s.data(), t.merges().data(), s.size());
  return s;
}

Tokenizer unpack_merges(const std::string& s) {
  std::vector<Tokenizer::Merge> m(s.size() / sizeof(Tokenizer::Merge));
  if (!m.empty()) std::memcpy(m.data(), s.data(), m.size() * sizeof(Tokenizer::Merge));
  return Tokenizer::from_merges(std::move(m));
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
  size_t num_files = 0;
  comm::run_agreed(comm, [&] {
    HT_REQUIRE(!o.labels_from_dirs, ExitCode::kUsage,
               "prepare: --labels-from-dirs writes one file; run it without mpirun (sharded prepare under mpirun "
               "-np {} is for causal-lm text)", R);
    validate_prepare(o);
    const auto files = corpus_files(o);
    num_files = files.size();
    HT_REQUIRE(files.size() >= static_cast<size_t>(R), ExitCode::kUsage,
               "prepare: {} input file(s) cannot make {} shards (each rank writes whole files); run on at most {} "
               "ranks", files.size(), R, files.size());
    const auto first = split_files(files, R);
    mine = read_files(files, first[r], first[r + 1]);
    if (bpe && r == 0) {  // one vocabulary for all shards, trained as the single-file prepare trains it
      const Corpus all = read_files(files, 0, files.size());
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

  const std::string out = shard_path(o.output, r, R);
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  PrepareSummary s;
  try {
    comm::run_agreed(comm, [&] {
      HT_REQUIRE(total > 0, ExitCode::kData, "prepare: no documents found in the {} input file(s)", num_files);
      const Tokenizer tok = bpe ? unpack_merges(merges) : Tokenizer::bytes();
      const auto all = assign_validation(total, o.val_fraction, o.seed);
      const std::vector<bool> val(all.begin() + offset, all.begin() + offset + n);
      // A shard must be readable alone (DatasetFile::open needs training tokens).
      HT_REQUIRE(std::count(val.begin(), val.end(), false) > 0, ExitCode::kData,
                 "prepare: shard {} would hold no training documents ({} document(s) in its input files); use fewer "
                 "ranks", out, n);
      s = write_dataset(o, tmp, mine, tok, val);
    });
    // Renamed only when every shard was written: a failed write leaves no partial set of shards.
    comm::run_agreed(comm, [&] { commit_dataset(tmp, out); });
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  HT_INFO("prepare: wrote {} shards {} ({} tokenizer, vocab {}, {} documents, {:.1f} MiB of text) in {:.1f}s", R,
          shard_path(o.output, 0, R), config::name_of(o.tokenizer), s.vocab_size, total,
          total_bytes / 1048576.0, clock.seconds());
  return s;
}

}  // namespace ht::data
