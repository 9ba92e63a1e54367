// Fuzz target: dataset metadata validation and every read path of a dataset file.
// Input bytes -> a valid HDF5 file written with the HDF5 C API whose content is hostile (root
// attribute values, types and shapes; dataset dtypes, dims, chunking, filters, unwritten chunks,
// links) -> Dataset::open, describe, the tokenizer, the identity, every sample through EvalReader
// and Loader, and every integer dataset through ChunkReader compared with what HDF5 itself reads.
// Findings: an exception other than ht::Error, a sanitizer report, or the pread path returning
// other values than HDF5 for the same dataset.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/chunk_reader.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "fuzz/fuzz_support.h"
#include "io/h5.h"

using namespace ht;
using namespace ht::fuzz;

namespace {

struct Layout {
  bool classification = false;
  std::vector<std::string> int_datasets;  // every integer dataset written, for the comparison with HDF5
};

void write_label_names(FuzzedDataProvider& fdp, hid_t f, int64_t labels) {
  std::vector<std::string> names;
  for (int64_t l = 0; l < labels; ++l) names.push_back("label" + std::to_string(l));
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 5: write_vlen_string_attr(f, "label_names", names, fdp.ConsumeBool(), false); return;
    case 6: fuzz_string_attr(fdp, f, "label_names", {"a"}); return;  // scalar and other hostile forms
    case 7: return;                                                   // absent
    default: {
      if (fdp.ConsumeBool() && !names.empty()) names[0] = fdp.ConsumeRandomLengthString(16);
      size_t width = 1;
      for (const auto& n : names) width = std::max(width, n.size());
      if (fdp.ConsumeIntegralInRange<int>(0, 7) == 7) width = fdp.ConsumeIntegralInRange<size_t>(1, 8192);
      std::string flat(width * names.size(), '\0');
      for (size_t i = 0; i < names.size(); ++i) flat.replace(i * width, std::min(width, names[i].size()), names[i].substr(0, width));
      H5Obj t(fixed_string_type(fdp, width), H5Tclose);
      hsize_t n = names.size();
      H5Obj s(H5Screate_simple(1, &n, nullptr), H5Sclose);
      H5Obj a(H5Acreate2(f, "label_names", t.id, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      if (a.ok() && n > 0) H5Awrite(a.id, t.id, flat.data());
    }
  }
}

// Writes the whole file; returns what it holds.
Layout write_file(FuzzedDataProvider& fdp, const std::string& path, const std::string& other_file) {
  Layout out;
  H5Obj file(create_file(fdp, path), H5Fclose);
  if (!file.ok()) finding("cannot create " + path);
  const hid_t f = file.id;
  // Decided first (while the input lasts): links, cycles and committed types added at the end.
  const int hostile = fdp.ConsumeIntegralInRange<int>(0, 7) >= 5 ? fdp.ConsumeIntegralInRange<int>(1, 2) : 0;
  out.classification = fdp.ConsumeIntegralInRange<int>(0, 2) == 2;
  const bool bpe = fdp.ConsumeIntegralInRange<int>(0, 3) == 3;
  const int64_t merges = bpe ? fdp.ConsumeIntegralInRange<int64_t>(0, 40) : 0;
  const int64_t vocab = data::kByteVocab + merges;
  fuzz_string_attr(fdp, f, "format", {data::kFormatName, "hpctrain-checkpoint"});
  fuzz_number_attr(fdp, f, "format_version", data::kFormatVersion);
  fuzz_string_attr(fdp, f, "task", {out.classification ? "classification" : "causal-lm",
                                    out.classification ? "causal-lm" : "classification"});
  fuzz_number_attr(fdp, f, "vocab_size", vocab);
  fuzz_string_attr(fdp, f, "tokenizer", {bpe ? "bpe" : "byte", bpe ? "byte" : "bpe"});
  fuzz_number_attr(fdp, f, "pad_id", data::kPadId);
  fuzz_number_attr(fdp, f, "eos_id", data::kEosId);
  if (!out.classification) {
    const hsize_t train = 200 + fdp.ConsumeIntegralInRange<hsize_t>(0, 600);
    const hsize_t val = 40 + fdp.ConsumeIntegralInRange<hsize_t>(0, 200);
    fuzz_number_attr(fdp, f, "num_tokens", static_cast<int64_t>(train + val));
    const std::pair<const char*, hsize_t> splits[] = {{"train", train}, {"val", val}};
    for (const auto& [split, n] : splits) {
      DatasetShape tokens;
      tokens.type = fdp.ConsumeBool() ? H5T_STD_U16LE : H5T_STD_U32LE;
      tokens.dims = {n};
      tokens.chunk_rows = 1 + fdp.ConsumeIntegralInRange<hsize_t>(0, 127) + (fdp.ConsumeBool() ? 0 : 64);
      tokens.value = [](hsize_t i) { return static_cast<int64_t>(i % 251); };
      const std::string tname = data::split_dataset(split, "tokens");
      if (fuzz_dataset(fdp, f, tname, tokens)) out.int_datasets.push_back(tname);
      const hsize_t docs = 1 + fdp.ConsumeIntegralInRange<hsize_t>(0, 5);
      DatasetShape offsets;
      offsets.type = fdp.ConsumeBool() ? H5T_STD_U64LE : H5T_STD_I64LE;
      offsets.dims = {docs + 1};
      offsets.value = [tokens_n = n, docs](hsize_t i) { return static_cast<int64_t>(i * tokens_n / docs); };
      const std::string oname = data::split_dataset(split, "doc_offsets");
      if (fuzz_dataset(fdp, f, oname, offsets)) out.int_datasets.push_back(oname);
    }
  } else {
    const int64_t width = 1 + fdp.ConsumeIntegralInRange<int64_t>(0, 15) + 7;
    const int64_t labels = 1 + fdp.ConsumeIntegralInRange<int64_t>(0, 4) + 1;
    fuzz_number_attr(fdp, f, "seq_len", width);
    write_label_names(fdp, f, labels);
    const std::pair<const char*, hsize_t> splits[] = {{"train", 40 + fdp.ConsumeIntegralInRange<hsize_t>(0, 60)},
                                                      {"val", 10 + fdp.ConsumeIntegralInRange<hsize_t>(0, 20)}};
    for (const auto& [split, rows] : splits) {
      DatasetShape ids;
      ids.type = fdp.ConsumeBool() ? H5T_STD_U16LE : H5T_STD_U32LE;
      ids.dims = {rows, static_cast<hsize_t>(width)};
      ids.chunk_rows = 1 + fdp.ConsumeIntegralInRange<hsize_t>(0, 15);
      ids.value = [width](hsize_t i) {
        const int64_t r = static_cast<int64_t>(i) / width, j = static_cast<int64_t>(i) % width;
        return j <= r % width ? (r + j) % 200 : data::kPadId;
      };
      const std::string xname = data::split_dataset(split, "input_ids");
      if (fuzz_dataset(fdp, f, xname, ids)) out.int_datasets.push_back(xname);
      DatasetShape y;
      y.type = fdp.ConsumeBool() ? H5T_STD_I32LE : H5T_STD_U8LE;
      y.dims = {rows};
      y.chunk_rows = 8;
      y.value = [labels](hsize_t i) { return static_cast<int64_t>(i) % labels; };
      const std::string yname = data::split_dataset(split, "labels");
      if (fuzz_dataset(fdp, f, yname, y)) out.int_datasets.push_back(yname);
    }
  }
  if (bpe || fdp.ConsumeIntegralInRange<int>(0, 15) == 15) {
    DatasetShape m;
    m.type = H5T_STD_U32LE;
    m.dims = {static_cast<hsize_t>(merges), 2};
    m.chunk_rows = 16;
    // merge i = (previous merge or 'a', 'b'): pieces "ab", "abb", ... (valid, distinct).
    m.value = [](hsize_t k) {
      const int64_t row = static_cast<int64_t>(k / 2);
      if (k % 2 == 1) return int64_t{'b'};
      return row == 0 ? int64_t{'a'} : data::kByteVocab + row - 1;
    };
    if (fuzz_dataset(fdp, f, "/tokenizer/merges", m)) out.int_datasets.push_back("/tokenizer/merges");
  }
  for (int i = 0; i < hostile; ++i)
    fuzz_hostile_object(fdp, f, out.classification ? "/train/input_ids" : "/train/tokens", other_file);
  return out;
}

// A second valid dataset file, the target of external links (its bytes sit at other offsets).
void write_other_file(const std::string& path) {
  FuzzedDataProvider none(nullptr, 0);
  (void)write_file(none, path, path);
}

// The pread path must return what HDF5 returns for the same dataset, or refuse.
void compare_with_hdf5(const data::Dataset& ds, const std::string& name) {
  std::vector<int64_t> ours;
  bool unsigned64 = false;
  const bool read_ok = only_ht_errors("ChunkReader", [&] {
    const io::DatasetInfo inf = io::info(ds.h5().id(), name);
    unsigned64 = inf.type_size == 8 && !inf.is_signed;
    auto reader = ds.reader(name, size_t{1} << 20);
    ours.resize(static_cast<size_t>(reader->rows() * reader->row_elems()));
    reader->read_rows(0, reader->rows(), reader->row_elems(), ours.data());
  });
  if (!read_ok || unsigned64) return;  // HDF5 clips uint64 above INT64_MAX, the reader wraps: not comparable
  std::vector<int64_t> theirs;
  try {
    theirs = io::read<int64_t>(ds.h5().id(), name);
  } catch (const Error& e) {
    finding("ChunkReader read " + ds.path() + ":" + name + " but HDF5 refuses it: " + e.what());
  }
  if (theirs != ours) finding("ChunkReader and HDF5 read different values from " + ds.path() + ":" + name);
}

void read_everything(FuzzedDataProvider& fdp, const std::string& path, const Layout& layout,
                     comm::Communicator& comm) {
  std::shared_ptr<const data::Dataset> ds;
  if (!only_ht_errors("Dataset::open", [&] { ds = data::Dataset::open(path); })) return;
  only_ht_errors("describe", [&] { (void)data::describe(*ds); });
  only_ht_errors("identity", [&] { (void)ds->identity(); });
  only_ht_errors("tokenizer", [&] {
    const data::Tokenizer tok = ds->tokenizer();
    const std::string text = "hello, world\n  abba ab 42";
    if (tok.decode(tok.encode(text)) != text) finding("tokenizer of " + path + " does not round-trip");
  });
  const int64_t seq_len = fdp.ConsumeIntegralInRange<int64_t>(0, 40) + (layout.classification ? 0 : 8);
  for (const char* split : {"train", "val"}) {
    only_ht_errors("EvalReader", [&] {
      data::EvalReader r(ds, split, seq_len, 1 + fdp.ConsumeIntegralInRange<int64_t>(0, 15), comm);
      data::Batch b;
      for (int i = 0; i < 512 && r.next(b); ++i) {
      }
    });
    only_ht_errors("Loader", [&] {
      data::LoaderOptions o;
      o.split = split;
      o.seq_len = seq_len;
      o.micro_batch = 1 + fdp.ConsumeIntegralInRange<int64_t>(0, 7);
      o.grad_accum = 1 + fdp.ConsumeIntegralInRange<int64_t>(0, 1);
      o.shuffle = fdp.ConsumeBool();
      o.prefetch = fdp.ConsumeIntegralInRange<int64_t>(0, 1);
      o.cache_bytes = size_t{1} << fdp.ConsumeIntegralInRange<int>(8, 20);
      data::Loader l(ds, o, comm);
      const int64_t micro = std::min<int64_t>(l.steps_per_epoch() * o.grad_accum + 1, 256);
      for (int64_t i = 0; i < micro; ++i) (void)l.next();
    });
  }
  for (const auto& name : layout.int_datasets) compare_with_hdf5(*ds, name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  quiet_process();
  static const std::unique_ptr<comm::Communicator> comm = comm::make_local();
  static const std::string other = [] {
    const std::string p = scratch_dir() + "/other.h5";
    write_other_file(p);
    return p;
  }();
  const std::string path = scratch_dir() + "/dataset.h5";
  FuzzedDataProvider fdp(data, size);
  const Layout layout = write_file(fdp, path, other);
  read_everything(fdp, path, layout, *comm);
  return 0;
}
