// Dataset: one or several dataset files (shards) as one, and the agreement checks between shards.
#include "data/dataset.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>

#include "core/error.h"
#include "core/fs.h"
#include "core/hash.h"

namespace ht::data {
namespace {

// Fails naming the first field in which `m` differs from the first shard `ref`.
void require_same(const DatasetMeta& ref, const DatasetMeta& m, const std::string& key) {
  auto differ = [&](const char* field, const std::string& a, const std::string& b) {
    HT_REQUIRE(a == b, ExitCode::kData, "{}: shard {} has {} {}, shard {} has {} (all shards must be prepared alike)",
               key, m.path, field, b, ref.path, a);
  };
  differ("task", std::string(config::name_of(ref.task)), std::string(config::name_of(m.task)));
  differ("tokenizer", std::string(config::name_of(ref.tokenizer)), std::string(config::name_of(m.tokenizer)));
  differ("vocab_size", std::to_string(ref.vocab_size), std::to_string(m.vocab_size));
  differ("pad_id", std::to_string(ref.pad_id), std::to_string(m.pad_id));
  differ("eos_id", std::to_string(ref.eos_id), std::to_string(m.eos_id));
  if (ref.task != config::Task::kClassification) return;
  differ("num_labels", std::to_string(ref.label_names.size()), std::to_string(m.label_names.size()));
  for (size_t i = 0; i < ref.label_names.size(); ++i)
    differ(("label_names[" + std::to_string(i) + "]").c_str(), ref.label_names[i], m.label_names[i]);
  differ("seq_len", std::to_string(ref.seq_len), std::to_string(m.seq_len));
}

std::string merges_text(const Tokenizer& t) {
  return fmt::format("{} merges (hash {:016x})", t.merges().size(),
                     fnv1a(kFnvOffset, t.merges().data(), t.merges().size() * sizeof(Tokenizer::Merge)));
}

}  // namespace

std::shared_ptr<const Dataset> Dataset::open(const std::string& path) {
  auto file = DatasetFile::open(path);
  DatasetMeta meta = file->meta();
  return std::shared_ptr<const Dataset>(new Dataset({std::move(file)}, std::move(meta)));
}

std::shared_ptr<const Dataset> Dataset::open_shards(const std::vector<std::string>& paths, const std::string& key) {
  HT_REQUIRE(!paths.empty(), ExitCode::kUsage, "{}: no dataset files", key);
  std::vector<std::shared_ptr<const DatasetFile>> files;
  for (const auto& p : paths) files.push_back(DatasetFile::open(p));
  const DatasetMeta& ref = files.front()->meta();
  DatasetMeta all = ref;
  all.num_train_tokens = all.num_val_tokens = all.num_train_rows = all.num_val_rows = 0;
  const std::string ref_merges = merges_text(files.front()->tokenizer());
  for (size_t i = 0; i < files.size(); ++i) {
    const DatasetMeta& m = files[i]->meta();
    require_same(ref, m, key);
    // Same vocab_size is not the same vocabulary: BPE shards trained on different text differ here.
    const std::string merges = i == 0 ? ref_merges : merges_text(files[i]->tokenizer());
    HT_REQUIRE(merges == ref_merges, ExitCode::kData,
               "{}: shard {} has tokenizer merges {}, shard {} has {} (prepare all shards with one vocabulary)", key,
               m.path, merges, ref.path, ref_merges);
    if (i > 0) all.path += ",";
    if (i > 0) all.path += m.path;
    all.num_train_tokens += m.num_train_tokens;
    all.num_val_tokens += m.num_val_tokens;
    all.num_train_rows += m.num_train_rows;
    all.num_val_rows += m.num_val_rows;
  }
  return std::shared_ptr<const Dataset>(new Dataset(std::move(files), std::move(all)));
}

Dataset::Dataset(std::vector<std::shared_ptr<const DatasetFile>> files, DatasetMeta meta)
    : files_(std::move(files)), meta_(std::move(meta)) {}

std::unique_ptr<RowReader> Dataset::reader(const std::string& dataset, size_t cache_bytes) const {
  // The cache budget is the rank's, not each shard's.
  const size_t per_shard = std::max<size_t>(cache_bytes / files_.size(), cache_bytes ? size_t{4} << 20 : 0);
  std::vector<std::unique_ptr<ChunkReader>> parts;
  for (const auto& f : files_) parts.push_back(f->reader(dataset, std::min(cache_bytes, per_shard)));
  return std::make_unique<RowReader>(std::move(parts), shared_from_this());
}

std::vector<std::string> Dataset::paths() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::string Dataset::identity() const {
  if (files_.size() == 1) return files_.front()->identity();
  uint64_t h = kFnvOffset;
  int64_t bytes = 0;
  for (const auto& f : files_) {
    const std::string id = f->identity();
    h = fnv1a(h, id + "|");
    bytes += std::stoll(id.substr(id.find('-') + 1));
  }
  return fmt::format("{:016x}-{}-s{}", h, bytes, files_.size());
}

std::vector<std::string> expand_shard_paths(const std::vector<std::string>& entries, const std::string& key) {
  std::vector<std::string> paths;
  for (const auto& e : entries) {
    if (e.find_first_of("*?[") == std::string::npos) {
      // A single file keeps DatasetFile::open's own message ("x.h5: file not found").
      struct stat st {};
      if (entries.size() == 1) { paths.push_back(e); continue; }
      HT_REQUIRE(::stat(e.c_str(), &st) == 0, ExitCode::kData, "{}: shard {}: file not found", key, e);
      paths.push_back(e);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(e.c_str(), 0, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    HT_REQUIRE(rc == 0, ExitCode::kData, "{}: the pattern '{}' matches no file", key, e);
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

std::shared_ptr<const Dataset> open_dataset(const std::vector<std::string>& entries, const std::string& key) {
  HT_REQUIRE(!entries.empty(), ExitCode::kUsage, "config key '{}' is empty: point it at a dataset file", key);
  const auto paths = expand_shard_paths(entries, key);
  return paths.size() == 1 ? Dataset::open(paths.front()) : Dataset::open_shards(paths, key);
}

namespace {

// fs::absolute_path resolves an existing file; a glob pattern only gets the working directory in front.
std::string absolute_entry(const std::string& entry) {
  if (entry.find_first_of("*?[") == std::string::npos) return fs::absolute_path(entry);
  if (entry.front() == '/') return entry;
  return fs::absolute_path(".") + "/" + entry;
}

}  // namespace

std::shared_ptr<const Dataset> open(const config::DataConfig& cfg, const std::string& key) {
  std::vector<std::string> entries;
  for (const auto& e : cfg.paths) entries.push_back(absolute_entry(e));
  return open_dataset(entries, key);
}

}  // namespace ht::data
