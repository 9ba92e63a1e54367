// DatasetFile::open: validation of a dataset file's metadata, once, when it is opened.
#include "data/dataset_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/hash.h"
#include "data/chunk_reader.h"
#include "io/h5.h"

namespace ht::data {

std::string split_dataset(const std::string& split, const std::string& name) { return "/" + split + "/" + name; }

namespace {

std::string dtype_name(const io::DatasetInfo& i) {
  switch (i.type_class) {
    case io::TypeClass::kInteger: return fmt::format("{}int{}", i.is_signed ? "" : "u", i.type_size * 8);
    case io::TypeClass::kFloat: return fmt::format("float{}", i.type_size * 8);
    case io::TypeClass::kString: return "string";
    case io::TypeClass::kCompound: return "compound";
    default: return "non-numeric";
  }
}

std::string dims_text(const std::vector<io::Size>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string children_text(io::Id f, const std::string& group) {
  if (!io::exists(f, group)) return fmt::format("group {} is missing", group);
  std::string s;
  for (const auto& c : io::list_children(f, group)) s += (s.empty() ? "" : ", ") + group + "/" + c;
  return s.empty() ? fmt::format("{} is empty", group) : "found: " + s;
}

// Checks that `name` exists, is an integer dataset of `ndims` dimensions, and returns its info.
io::DatasetInfo require_dataset(io::Id f, const std::string& path, const std::string& name, size_t ndims,
                                bool token_ids) {
  const auto slash = name.rfind('/');
  HT_REQUIRE(io::exists(f, name), ExitCode::kData, "{}: dataset {} is missing ({}); wrong file or layout?", path,
             name, children_text(f, name.substr(0, slash)));
  const io::DatasetInfo i = io::info(f, name);
  io::require_within_file(f, name, i);
  HT_REQUIRE(i.type_class == io::TypeClass::kInteger, ExitCode::kData, "{}:{}: dtype {}, expected an integer type", path, name,
             dtype_name(i));
  io::require_plain_integer(f, name, i);
  if (token_ids)
    HT_REQUIRE(!i.is_signed && (i.type_size == 2 || i.type_size == 4), ExitCode::kData,
               "{}:{}: dtype {}, expected uint16 or uint32", path, name, dtype_name(i));
  HT_REQUIRE(i.dims.size() == ndims, ExitCode::kData, "{}:{}: shape {} has {} dimension(s), expected {}-D", path,
             name, dims_text(i.dims), i.dims.size(), ndims);
  return i;
}

// doc_offsets[0] = 0, non-decreasing, doc_offsets[D] = T (docs/data-format.md): a document table
// that points outside its tokens is a damaged file even where the trainer does not read it.
void check_doc_offsets(io::Id f, const DatasetMeta& m, const std::string& name, const io::DatasetInfo& info,
                       int64_t tokens) {
  HT_REQUIRE(info.dims[0] >= 1 && static_cast<int64_t>(info.dims[0]) <= tokens + 1, ExitCode::kData,
             "{}:{}: {} entries for {} tokens (expected between 1 and tokens + 1)", m.path, name, info.dims[0], tokens);
  const std::vector<int64_t> offsets = io::read<int64_t>(f, name);
  HT_REQUIRE(offsets.front() == 0, ExitCode::kData, "{}:{}: first offset is {}, expected 0", m.path, name,
             offsets.front());
  for (size_t d = 1; d < offsets.size(); ++d)
    HT_REQUIRE(offsets[d] >= offsets[d - 1], ExitCode::kData, "{}:{}: offset {} ({}) is below offset {} ({})", m.path,
               name, d, offsets[d], d - 1, offsets[d - 1]);
  HT_REQUIRE(offsets.back() == tokens, ExitCode::kData, "{}:{}: last offset is {} but the split holds {} tokens",
             m.path, name, offsets.back(), tokens);
}

void read_lm_split(io::Id f, DatasetMeta& m, const std::string& split, int64_t& tokens) {
  const auto t = require_dataset(f, m.path, split_dataset(split, "tokens"), 1, true);
  HT_REQUIRE(t.type_size == 4 || m.vocab_size <= 65536, ExitCode::kData,
             "{}:{}: uint16 cannot hold vocab_size {}", m.path, split_dataset(split, "tokens"), m.vocab_size);
  tokens = static_cast<int64_t>(t.dims[0]);
  HT_REQUIRE(split != "train" || tokens > 0, ExitCode::kData, "{}:/train/tokens: zero tokens (empty dataset)", m.path);
  const std::string offsets = split_dataset(split, "doc_offsets");
  check_doc_offsets(f, m, offsets, require_dataset(f, m.path, offsets, 1, false), tokens);
}

void read_cls_split(io::Id f, DatasetMeta& m, const std::string& split, int64_t& rows) {
  const std::string ids = split_dataset(split, "input_ids"), labels = split_dataset(split, "labels");
  const auto x = require_dataset(f, m.path, ids, 2, true);
  const auto y = require_dataset(f, m.path, labels, 1, false);
  HT_REQUIRE(static_cast<int64_t>(x.dims[1]) == m.seq_len, ExitCode::kData,
             "{}:{}: width {} differs from the seq_len attribute {}", m.path, ids, x.dims[1], m.seq_len);
  HT_REQUIRE(x.dims[0] == y.dims[0], ExitCode::kData, "{}: {} has {} rows but {} has {}", m.path, ids, x.dims[0],
             labels, y.dims[0]);
  rows = static_cast<int64_t>(x.dims[0]);
}

void read_root_attributes(io::Id f, DatasetMeta& m) {
  HT_REQUIRE(io::has_attr(f, "format"), ExitCode::kData,
             "{}: not an hpctrain dataset (root attribute 'format' missing; create one with `hpctrain prepare`)",
             m.path);
  const std::string format = io::attr_string(f, "format");
  HT_REQUIRE(format == kFormatName, ExitCode::kData, "{}: format '{}' is not '{}'", m.path, format, kFormatName);
  auto need = [&](const char* a) {
    HT_REQUIRE(io::has_attr(f, a), ExitCode::kData, "{}: root attribute '{}' is missing", m.path, a);
  };
  for (const char* a : {"format_version", "task", "vocab_size", "tokenizer", "pad_id", "eos_id"}) need(a);
  const int64_t version = io::attr_int(f, "format_version");
  HT_REQUIRE(version == kFormatVersion, ExitCode::kData, "{}: format_version {} is not supported (this build reads {})",
             m.path, version, kFormatVersion);
  const std::string task = io::attr_string(f, "task");
  const auto parsed_task = config::parse_enum<config::Task>(task);
  HT_REQUIRE(parsed_task.has_value(), ExitCode::kData, "{}: task '{}' is neither causal-lm nor classification",
             m.path, task);
  m.task = *parsed_task;
  m.vocab_size = io::attr_int(f, "vocab_size");
  const std::string tokenizer = io::attr_string(f, "tokenizer");
  const auto parsed_tokenizer = config::parse_enum<TokenizerKind>(tokenizer);
  HT_REQUIRE(parsed_tokenizer.has_value(), ExitCode::kData, "{}: unknown tokenizer '{}'", m.path, tokenizer);
  m.tokenizer = *parsed_tokenizer;
  m.pad_id = io::attr_int(f, "pad_id");
  m.eos_id = io::attr_int(f, "eos_id");
  // Token ids are stored as uint16/uint32: a larger vocabulary cannot occur, and taking it at its
  // word would size the model's embedding after a corrupted number.
  HT_REQUIRE(m.vocab_size > 0 && m.vocab_size <= (int64_t{1} << 32), ExitCode::kData,
             "{}: root attribute vocab_size = {} is outside [1, 2^32]", m.path, m.vocab_size);
  HT_REQUIRE(m.pad_id >= 0 && m.pad_id < m.vocab_size && m.eos_id >= 0 && m.eos_id < m.vocab_size, ExitCode::kData,
             "{}: root attributes pad_id = {} and eos_id = {} must be token ids below vocab_size = {}", m.path,
             m.pad_id, m.eos_id, m.vocab_size);
}

DatasetMeta read_validated_meta(io::Id f, const std::string& path) {
  DatasetMeta m;
  m.path = path;
  read_root_attributes(f, m);
  if (m.task == config::Task::kCausalLm) {
    HT_REQUIRE(io::has_attr(f, "num_tokens"), ExitCode::kData, "{}: root attribute 'num_tokens' is missing", path);
    read_lm_split(f, m, "train", m.num_train_tokens);
    read_lm_split(f, m, "val", m.num_val_tokens);
    const int64_t declared = io::attr_int(f, "num_tokens");
    HT_REQUIRE(declared == m.num_train_tokens + m.num_val_tokens, ExitCode::kData,
               "{}: num_tokens attribute {} but /train/tokens + /val/tokens hold {}", path, declared,
               m.num_train_tokens + m.num_val_tokens);
  } else {
    HT_REQUIRE(io::has_attr(f, "seq_len") && io::has_attr(f, "label_names"), ExitCode::kData,
               "{}: classification dataset needs root attributes 'seq_len' and 'label_names'", path);
    m.seq_len = io::attr_int(f, "seq_len");
    m.label_names = io::attr_strings(f, "label_names");
    HT_REQUIRE(m.seq_len > 0 && m.seq_len <= (int64_t{1} << 24) && !m.label_names.empty(), ExitCode::kData,
               "{}: seq_len {} (must be in [1, 2^24]) and {} label_names (must be at least one)", path, m.seq_len,
               m.label_names.size());
    read_cls_split(f, m, "train", m.num_train_rows);
    read_cls_split(f, m, "val", m.num_val_rows);
    HT_REQUIRE(m.num_train_rows > 0, ExitCode::kData, "{}:/train/input_ids: zero rows (empty dataset)", path);
  }
  return m;
}

}  // namespace

std::shared_ptr<const DatasetFile> DatasetFile::open(const std::string& path) {
  io::File file = io::File::open_read(path);
  DatasetMeta meta = read_validated_meta(file.id(), path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HT_REQUIRE(fd >= 0, ExitCode::kData, "{}: cannot open for reading: {}", path, std::strerror(errno));
  return std::shared_ptr<const DatasetFile>(new DatasetFile(std::move(file), fd, std::move(meta)));
}

DatasetFile::DatasetFile(io::File file, int fd, DatasetMeta meta) : file_(std::move(file)), fd_(fd), meta_(std::move(meta)) {}

DatasetFile::~DatasetFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::unique_ptr<ChunkReader> DatasetFile::reader(const std::string& dataset, size_t cache_bytes) const {
  auto r = std::make_unique<ChunkReader>(file_, fd_, dataset, cache_bytes);
  r->keep_alive(shared_from_this());  // the descriptor it reads through stays open while it lives
  return r;
}

Tokenizer DatasetFile::tokenizer() const { return Tokenizer::load(file_); }

std::string DatasetFile::identity() const {
  const DatasetMeta& m = meta_;
  std::string text = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", config::name_of(m.task), m.vocab_size,
                                 config::name_of(m.tokenizer), m.pad_id, m.eos_id, m.seq_len, m.num_train_tokens,
                                 m.num_val_tokens, m.num_train_rows, m.num_val_rows);
  for (const auto& l : m.label_names) text += "|" + l;
  const bool lm = m.task == config::Task::kCausalLm;
  for (const char* split : {"train", "val"})
    for (const char* name : lm ? std::vector<const char*>{"tokens"} : std::vector<const char*>{"input_ids", "labels"})
      text += fmt::format("|{:016x}", reader(split_dataset(split, name), 0)->checksum_digest());
  const uint64_t h = fnv1a(kFnvOffset, text);
  struct stat st {};
  const int64_t bytes = ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  return fmt::format("{:016x}-{}", h, bytes);
}

DatasetMeta read_meta(const std::string& path) { return DatasetFile::open(path)->meta(); }

bool is_dataset_file(const std::string& path) {
  io::File file = io::File::open_read(path);
  return io::has_attr(file.id(), "format") && io::attr_string(file.id(), "format") == kFormatName;
}

void check_vocab(const DatasetMeta& meta, int64_t model_vocab_size) {
  HT_REQUIRE(model_vocab_size <= 0 || model_vocab_size >= meta.vocab_size, ExitCode::kData,
             "{}: vocab_size {} exceeds the model's vocab_size {} (set model.vocab_size = {} or 0 = from the dataset)",
             meta.path, meta.vocab_size, model_vocab_size, meta.vocab_size);
}

int64_t num_samples(const DatasetMeta& meta, const std::string& split, int64_t seq_len) {
  HT_REQUIRE(split == "train" || split == "val", ExitCode::kUsage, "unknown split '{}' (train or val)", split);
  if (meta.task == config::Task::kClassification) return split == "train" ? meta.num_train_rows : meta.num_val_rows;
  HT_REQUIRE(seq_len > 0, ExitCode::kUsage, "seq_len must be positive for a causal-lm dataset");
  const int64_t tokens = split == "train" ? meta.num_train_tokens : meta.num_val_tokens;
  return tokens > seq_len ? (tokens - 1) / seq_len : 0;
}

}  // namespace ht::data
