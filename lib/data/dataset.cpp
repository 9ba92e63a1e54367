// read_meta: validation of dataset files at open; describe: the `inspect` view of one.
#include "data/dataset.h"

#include <algorithm>

#include "core/error.h"
#include "data/chunk_reader.h"
#include "io/h5.h"

namespace ht::data {
namespace {

std::string dtype_name(const io::DatasetInfo& i) {
  switch (i.type_class) {
    case H5T_INTEGER: return fmt::format("{}int{}", i.is_signed ? "" : "u", i.type_size * 8);
    case H5T_FLOAT: return fmt::format("float{}", i.type_size * 8);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    default: return "non-numeric";
  }
}

std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string children_text(hid_t f, const std::string& group) {
  if (!io::exists(f, group)) return fmt::format("group {} is missing", group);
  std::string s;
  for (const auto& c : io::list_children(f, group)) s += (s.empty() ? "" : ", ") + group + "/" + c;
  return s.empty() ? fmt::format("{} is empty", group) : "found: " + s;
}

// Checks that `name` exists, is an integer dataset of `ndims` dimensions, and returns its info.
io::DatasetInfo require_dataset(hid_t f, const std::string& path, const std::string& name, size_t ndims,
                                bool token_ids) {
  const auto slash = name.rfind('/');
  HT_REQUIRE(io::exists(f, name), ExitCode::kData, "{}: dataset {} is missing ({}); wrong file or layout?", path,
             name, children_text(f, name.substr(0, slash)));
  const io::DatasetInfo i = io::info(f, name);
  HT_REQUIRE(i.type_class == H5T_INTEGER, ExitCode::kData, "{}:{}: dtype {}, expected an integer type", path, name,
             dtype_name(i));
  if (token_ids)
    HT_REQUIRE(!i.is_signed && (i.type_size == 2 || i.type_size == 4), ExitCode::kData,
               "{}:{}: dtype {}, expected uint16 or uint32", path, name, dtype_name(i));
  HT_REQUIRE(i.dims.size() == ndims, ExitCode::kData, "{}:{}: shape {} has {} dimension(s), expected {}-D", path,
             name, dims_text(i.dims), i.dims.size(), ndims);
  return i;
}

void read_lm_split(hid_t f, DatasetMeta& m, const std::string& split, int64_t& tokens) {
  const auto t = require_dataset(f, m.path, split_dataset(split, "tokens"), 1, true);
  HT_REQUIRE(t.type_size == 4 || m.vocab_size <= 65536, ExitCode::kData,
             "{}:{}: uint16 cannot hold vocab_size {}", m.path, split_dataset(split, "tokens"), m.vocab_size);
  require_dataset(f, m.path, split_dataset(split, "doc_offsets"), 1, false);
  tokens = static_cast<int64_t>(t.dims[0]);
}

void read_cls_split(hid_t f, DatasetMeta& m, const std::string& split, int64_t& rows) {
  const std::string ids = split_dataset(split, "input_ids"), labels = split_dataset(split, "labels");
  const auto x = require_dataset(f, m.path, ids, 2, true);
  const auto y = require_dataset(f, m.path, labels, 1, false);
  HT_REQUIRE(static_cast<int64_t>(x.dims[1]) == m.seq_len, ExitCode::kData,
             "{}:{}: width {} differs from the seq_len attribute {}", m.path, ids, x.dims[1], m.seq_len);
  HT_REQUIRE(x.dims[0] == y.dims[0], ExitCode::kData, "{}: {} has {} rows but {} has {}", m.path, ids, x.dims[0],
             labels, y.dims[0]);
  rows = static_cast<int64_t>(x.dims[0]);
}

void read_root_attributes(hid_t f, DatasetMeta& m) {
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
  m.task = io::attr_string(f, "task");
  HT_REQUIRE(m.task == "causal-lm" || m.task == "classification", ExitCode::kData,
             "{}: task '{}' is neither causal-lm nor classification", m.path, m.task);
  m.vocab_size = io::attr_int(f, "vocab_size");
  m.tokenizer = io::attr_string(f, "tokenizer");
  m.pad_id = io::attr_int(f, "pad_id");
  m.eos_id = io::attr_int(f, "eos_id");
  HT_REQUIRE(m.vocab_size > 0, ExitCode::kData, "{}: vocab_size {} must be positive", m.path, m.vocab_size);
  HT_REQUIRE(m.tokenizer == "byte" || m.tokenizer == "bpe", ExitCode::kData, "{}: unknown tokenizer '{}'", m.path,
             m.tokenizer);
}

}  // namespace

std::string split_dataset(const std::string& split, const std::string& name) { return "/" + split + "/" + name; }

DatasetMeta read_meta(const std::string& path) {
  io::File file = io::File::open_read(path);
  const hid_t f = file.id();
  DatasetMeta m;
  m.path = path;
  read_root_attributes(f, m);
  if (m.task == "causal-lm") {
    HT_REQUIRE(io::has_attr(f, "num_tokens"), ExitCode::kData, "{}: root attribute 'num_tokens' is missing", path);
    read_lm_split(f, m, "train", m.num_train_tokens);
    read_lm_split(f, m, "val", m.num_val_tokens);
    const int64_t declared = io::attr_int(f, "num_tokens");
    HT_REQUIRE(declared == m.num_train_tokens + m.num_val_tokens, ExitCode::kData,
               "{}: num_tokens attribute {} but /train/tokens + /val/tokens hold {}", path, declared,
               m.num_train_tokens + m.num_val_tokens);
    HT_REQUIRE(m.num_train_tokens > 0, ExitCode::kData, "{}:/train/tokens: zero tokens (empty dataset)", path);
  } else {
    HT_REQUIRE(io::has_attr(f, "seq_len") && io::has_attr(f, "label_names"), ExitCode::kData,
               "{}: classification dataset needs root attributes 'seq_len' and 'label_names'", path);
    m.seq_len = io::attr_int(f, "seq_len");
    m.label_names = io::attr_strings(f, "label_names");
    HT_REQUIRE(m.seq_len > 0 && !m.label_names.empty(), ExitCode::kData,
               "{}: seq_len {} and {} label_names: both must be positive", path, m.seq_len, m.label_names.size());
    read_cls_split(f, m, "train", m.num_train_rows);
    read_cls_split(f, m, "val", m.num_val_rows);
    HT_REQUIRE(m.num_train_rows > 0, ExitCode::kData, "{}:/train/input_ids: zero rows (empty dataset)", path);
  }
  return m;
}

void check_vocab(const DatasetMeta& meta, int64_t model_vocab_size) {
  HT_REQUIRE(model_vocab_size <= 0 || model_vocab_size >= meta.vocab_size, ExitCode::kData,
             "{}: vocab_size {} exceeds the model's vocab_size {} (set model.vocab_size = {} or 0 = from the dataset)",
             meta.path, meta.vocab_size, model_vocab_size, meta.vocab_size);
}

int64_t num_samples(const DatasetMeta& meta, const std::string& split, int64_t seq_len) {
  HT_REQUIRE(split == "train" || split == "val", ExitCode::kUsage, "unknown split '{}' (train or val)", split);
  if (meta.task == "classification") return split == "train" ? meta.num_train_rows : meta.num_val_rows;
  HT_REQUIRE(seq_len > 0, ExitCode::kUsage, "seq_len must be positive for a causal-lm dataset");
  const int64_t tokens = split == "train" ? meta.num_train_tokens : meta.num_val_tokens;
  return tokens > seq_len ? (tokens - 1) / seq_len : 0;
}

}  // namespace ht::data
