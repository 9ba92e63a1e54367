// describe(): what `hpctrain inspect` prints for a dataset file. Reads every chunk, so a
// checksum failure anywhere in the file is reported (as ht::Error, kData).
#include <fmt/format.h>

#include "core/error.h"
#include "data/chunk_reader.h"
#include "data/dataset.h"
#include "io/h5.h"

namespace ht::data {
namespace {

std::string dataset_line(const Dataset& data, const std::string& name, int64_t* max_value) {
  const io::DatasetInfo i = io::info(data.h5().id(), name);
  std::string dims;
  for (size_t d = 0; d < i.dims.size(); ++d) dims += (d ? " x " : "") + std::to_string(i.dims[d]);
  auto reader = data.reader(name, size_t{64} << 20);
  *max_value = reader->verify_all();
  return fmt::format("  {:<22} {:>8} [{}]  chunks {} x {} rows{}  checksums ok\n", name,
                     fmt::format("{}int{}", i.is_signed ? "" : "u", i.type_size * 8), dims, reader->num_chunks(),
                     reader->chunk_rows(), i.has_fletcher32 ? ", fletcher32" : ", NO CHECKSUM");
}

}  // namespace

std::string describe(const Dataset& data) {
  const DatasetMeta& m = data.meta();
  const std::string& path = m.path;
  const io::Id f = data.h5().id();
  std::string out = fmt::format("{}: {} v{}, task {}, tokenizer {}, vocab_size {}, pad_id {}, eos_id {}\n", path,
                                kFormatName, kFormatVersion, config::name_of(m.task), config::name_of(m.tokenizer),
                                m.vocab_size, m.pad_id, m.eos_id);
  if (m.task == config::Task::kCausalLm) {
    out += fmt::format("  tokens: train {}, val {}\n", m.num_train_tokens, m.num_val_tokens);
  } else {
    out += fmt::format("  rows: train {}, val {}; seq_len {}; labels:", m.num_train_rows, m.num_val_rows, m.seq_len);
    for (const auto& l : m.label_names) out += " " + l;
    out += "\n";
  }
  const std::vector<std::string> names =
      m.task == config::Task::kCausalLm ? std::vector<std::string>{"tokens", "doc_offsets"}
                            : std::vector<std::string>{"input_ids", "labels"};
  for (const char* split : {"train", "val"}) {
    for (const auto& n : names) {
      const std::string name = split_dataset(split, n);
      int64_t max_value = 0;
      out += dataset_line(data, name, &max_value);
      const bool ids = n == "tokens" || n == "input_ids";
      if (ids)
        HT_REQUIRE(max_value < m.vocab_size, ExitCode::kData, "{}:{}: token id {} >= vocab_size {}", path, name,
                   max_value, m.vocab_size);
      if (n == "labels")
        HT_REQUIRE(max_value < static_cast<int64_t>(m.label_names.size()), ExitCode::kData,
                   "{}:{}: label {} outside label_names (0..{})", path, name, max_value, m.label_names.size() - 1);
    }
  }
  if (io::exists(f, "/tokenizer/merges")) {
    int64_t max_value = 0;
    out += dataset_line(data, "/tokenizer/merges", &max_value);
  }
  return out;
}

}  // namespace ht::data
