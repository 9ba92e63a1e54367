// Fuzz target: the pread + Fletcher32 chunk path (ht::data::ChunkReader) and what the sample
// readers make of the values it returns. A valid dataset file (one of three templates, built once
// per process) gets its chunk bytes, stored checksums included, overwritten by the input; an edit
// may also store the checksum of the new bytes (straight or half-swapped, as HDF5 < 1.6.3 wrote
// it), so that hostile values get past the checksum to the value checks. Only chunk bytes change:
// the metadata HDF5 parses stays valid. Then every row is read through ChunkReader, describe,
// EvalReader and Loader, and ChunkReader's values are compared with what HDF5 reads.
#include <fcntl.h>
#include <unistd.h>

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

struct ChunkSpan {
  uint64_t address = 0, bytes = 0;  // file offset and stored size (payload + 4 checksum bytes)
};

struct Template {
  std::string bytes;                 // the whole valid file
  std::vector<std::string> datasets; // integer datasets
  std::vector<ChunkSpan> chunks;     // of all of them
  bool classification = false;
};

void write_root(hid_t f, const char* task) {
  io::set_attr(f, "format", std::string(data::kFormatName));
  io::set_attr(f, "format_version", data::kFormatVersion);
  io::set_attr(f, "task", std::string(task));
  io::set_attr(f, "vocab_size", data::kByteVocab);
  io::set_attr(f, "tokenizer", std::string("byte"));
  io::set_attr(f, "pad_id", data::kPadId);
  io::set_attr(f, "eos_id", data::kEosId);
}

template <typename T>
void write_lm(const std::string& path, hsize_t chunk) {
  io::File f = io::File::create(path);
  write_root(f.id(), "causal-lm");
  io::set_attr(f.id(), "num_tokens", int64_t{700 + 130});
  for (const auto& [split, n] : {std::pair<const char*, int64_t>{"train", 700}, {"val", 130}}) {
    std::vector<T> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<T>(i % 251);
    io::write(f.id(), data::split_dataset(split, "tokens"), tokens, {}, chunk);
    io::write(f.id(), data::split_dataset(split, "doc_offsets"), std::vector<int64_t>{0, n / 3, n});
  }
}

void write_cls(const std::string& path) {
  io::File f = io::File::create(path);
  write_root(f.id(), "classification");
  const int64_t width = 12;
  io::set_attr(f.id(), "seq_len", width);
  io::set_attr(f.id(), "label_names", std::vector<std::string>{"no", "yes", "maybe"});
  for (const auto& [split, n] : {std::pair<const char*, int64_t>{"train", 40}, {"val", 12}}) {
    std::vector<uint32_t> ids;
    std::vector<int32_t> labels;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < width; ++j) ids.push_back(static_cast<uint32_t>(j <= r % width ? (r + j) % 200 : data::kPadId));
      labels.push_back(static_cast<int32_t>(r % 3));
    }
    io::write(f.id(), data::split_dataset(split, "input_ids"), ids, {static_cast<hsize_t>(n), static_cast<hsize_t>(width)}, 5);
    io::write(f.id(), data::split_dataset(split, "labels"), labels, {}, 8);
  }
}

std::string slurp(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY);
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

Template make_template(int kind) {
  const std::string path = scratch_dir() + "/template" + std::to_string(kind) + ".h5";
  Template t;
  t.classification = kind == 2;
  if (kind == 0) write_lm<uint16_t>(path, 64);
  else if (kind == 1) write_lm<uint32_t>(path, 50);
  else write_cls(path);
  t.datasets = t.classification ? std::vector<std::string>{"/train/input_ids", "/train/labels", "/val/input_ids", "/val/labels"}
                                : std::vector<std::string>{"/train/tokens", "/val/tokens"};
  io::File f = io::File::open_read(path);
  for (const auto& name : t.datasets) {
    io::Handle ds = io::open_dataset(f.id(), name);
    io::Handle space(H5Dget_space(ds.id()), H5Sclose);
    hsize_t n = 0;
    if (H5Dget_num_chunks(ds.id(), space.id(), &n) < 0 || n == 0) finding("template " + name + " has no chunks");
    for (hsize_t i = 0; i < n; ++i) {
      ChunkSpan c;
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info(ds.id(), space.id(), i, nullptr, &mask, &addr, &size) < 0 || size < 5)
        finding("template " + name + ": no chunk info");
      c.address = addr;
      c.bytes = size;
      t.chunks.push_back(c);
    }
  }
  f.close();
  t.bytes = slurp(path);
  ::unlink(path.c_str());
  return t;
}

const Template& template_of(int kind) {
  static const Template templates[3] = {make_template(0), make_template(1), make_template(2)};
  return templates[kind];
}

void store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Applies the input's edits to a copy of the template's bytes.
std::string edited(FuzzedDataProvider& fdp, const Template& t) {
  std::string file = t.bytes;
  const int edits = fdp.ConsumeIntegralInRange<int>(1, 4);
  for (int e = 0; e < edits && fdp.remaining_bytes() > 0; ++e) {
    const ChunkSpan& c = t.chunks[fdp.ConsumeIntegralInRange<size_t>(0, t.chunks.size() - 1)];
    auto* chunk = reinterpret_cast<uint8_t*>(file.data() + c.address);
    const uint64_t at = fdp.ConsumeIntegralInRange<uint64_t>(0, c.bytes - 1);
    const std::vector<uint8_t> bytes = fdp.ConsumeBytes<uint8_t>(fdp.ConsumeIntegralInRange<size_t>(1, c.bytes - at));
    std::copy(bytes.begin(), bytes.end(), chunk + at);
    switch (fdp.ConsumeIntegralInRange<int>(0, 2)) {  // the checksum of the new bytes, or not
      case 1: store_le32(chunk + c.bytes - 4, data::fletcher32(chunk, c.bytes - 4)); break;
      case 2: {
        const uint32_t f = data::fletcher32(chunk, c.bytes - 4);
        store_le32(chunk + c.bytes - 4, ((f & 0x00ff00ffu) << 8) | ((f & 0xff00ff00u) >> 8));
        break;
      }
      default: break;
    }
  }
  return file;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) finding("cannot write " + path);
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  quiet_process();
  static const std::unique_ptr<comm::Communicator> comm = comm::make_local();
  FuzzedDataProvider fdp(data, size);
  const Template& t = template_of(fdp.ConsumeIntegralInRange<int>(0, 2));
  const std::string path = scratch_dir() + "/chunks.h5";
  write_bytes(path, edited(fdp, t));

  std::shared_ptr<const data::Dataset> ds;
  if (!only_ht_errors("Dataset::open", [&] { ds = data::Dataset::open(path); }))
    finding("the metadata was not touched, yet Dataset::open refused the file");
  // Every dataset: rows in pieces the input chooses, then all at once, compared with HDF5.
  for (const auto& name : t.datasets) {
    std::vector<int64_t> ours;
    const bool ok = only_ht_errors("ChunkReader", [&] {
      auto r = ds->reader(name, size_t{1} << fdp.ConsumeIntegralInRange<int>(0, 16));
      const int64_t rows = r->rows(), cols = r->row_elems();
      for (int i = 0; i < 4 && rows > 0; ++i) {
        const int64_t start = fdp.ConsumeIntegralInRange<int64_t>(0, rows - 1);
        const int64_t count = fdp.ConsumeIntegralInRange<int64_t>(0, rows - start);
        const int64_t c = fdp.ConsumeIntegralInRange<int64_t>(0, cols);
        std::vector<int64_t> part(static_cast<size_t>(count * c));
        r->read_rows(start, count, c, part.data());
      }
      ours.resize(static_cast<size_t>(rows * cols));
      r->read_rows(0, rows, cols, ours.data());
    });
    if (!ok) continue;
    std::vector<int64_t> theirs;
    try {
      theirs = io::read<int64_t>(ds->h5().id(), name);
    } catch (const Error& e) {
      finding("ChunkReader accepted " + name + " but HDF5 refuses it: " + e.what());
    }
    if (theirs != ours) finding("ChunkReader and HDF5 read different values from " + name);
  }
  only_ht_errors("describe", [&] { (void)data::describe(*ds); });
  only_ht_errors("identity", [&] { (void)ds->identity(); });
  for (const char* split : {"train", "val"}) {
    only_ht_errors("EvalReader", [&] {
      data::EvalReader r(ds, split, t.classification ? 0 : 16, 4, *comm);
      data::Batch b;
      while (r.next(b)) {
      }
    });
    only_ht_errors("Loader", [&] {
      data::LoaderOptions o;
      o.split = split;
      o.seq_len = t.classification ? 0 : 16;
      o.micro_batch = 2;
      o.prefetch = 0;
      o.cache_bytes = 4096;
      data::Loader l(ds, o, *comm);
      for (int64_t i = 0; i < l.steps_per_epoch(); ++i) (void)l.next();
    });
  }
  return 0;
}
