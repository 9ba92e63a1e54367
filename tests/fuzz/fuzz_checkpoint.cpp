// Fuzz target: the checkpoint reader. Input bytes -> a valid HDF5 checkpoint file written with the
// HDF5 C API with hostile content (root attributes, /state values, model/optimizer/rank/<r>
// tensors of every dtype and shape, torch_dtype and scalar markers, the /config string, links,
// cycles and committed types) -> verify, read_file, describe, read_config_text (and the config it
// holds), check_compatible, and Manager::load_latest on a directory whose `latest` pointer and
// file names come from the input too.
// Findings: an exception other than ht::Error (verify must not throw at all), a sanitizer
// report, or a file that reads back but does not fit the model made of its own tensors.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "fuzz/fuzz_support.h"
#include "io/h5.h"

using namespace ht;
using namespace ht::fuzz;

namespace {

const char* const kValidConfig = "[model]\nn_layer = 1\nn_head = 1\nd_model = 2\nseq_len = 4\n";

// A tensor dataset: chunked + Fletcher32 like write_tensor, or hostile (dtype, shape, layout, links).
void write_tensor(FuzzedDataProvider& fdp, hid_t f, const std::string& key, const std::vector<hsize_t>& dims,
                  hid_t type) {
  DatasetShape shape;
  shape.type = type;
  shape.dims = dims;
  shape.chunk_rows = 1 + fdp.ConsumeIntegralInRange<hsize_t>(0, 7);
  shape.value = [](hsize_t i) { return static_cast<int64_t>(i % 7); };
  if (!fuzz_dataset(fdp, f, key, shape)) return;
  if (fdp.ConsumeIntegralInRange<int>(0, 3) != 3) return;
  H5Obj ds(H5Oopen(f, key.c_str(), H5P_DEFAULT), H5Oclose);
  if (!ds.ok()) return;
  if (fdp.ConsumeBool()) fuzz_string_attr(fdp, ds.id, "torch_dtype", {"bfloat16", "float16", "bool", "float32"});
  if (fdp.ConsumeBool()) fuzz_number_attr(fdp, ds.id, "scalar", 1);
}

// The /config string: a 1-element chunked fixed-length string with Fletcher32 (write_checked_string).
void write_config(FuzzedDataProvider& fdp, hid_t f, const std::string& key) {
  std::string text = fdp.ConsumeBool() ? kValidConfig : fdp.ConsumeRandomLengthString(256);
  H5Obj type(fixed_string_type(fdp, std::max<size_t>(1, text.size())), H5Tclose);
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 7) {  // variable-length: the readers refuse it
    type = H5Obj(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.id, H5T_VARIABLE);
  }
  const hsize_t n = fdp.ConsumeIntegralInRange<int>(0, 7) == 7 ? fdp.ConsumeIntegralInRange<hsize_t>(0, 3) : 1;
  H5Obj space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Obj dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const hsize_t chunk = 1;
  if (n > 0) {
    H5Pset_chunk(dcpl.id, 1, &chunk);
    if (fdp.ConsumeIntegralInRange<int>(0, 7) != 7) H5Pset_fletcher32(dcpl.id);
  }
  H5Obj lcpl = lcpl_intermediate();
  H5Obj ds(H5Dcreate2(f, key.c_str(), type.id, space.id, lcpl.id, dcpl.id, H5P_DEFAULT), H5Dclose);
  if (!ds.ok() || n == 0) return;
  if (H5Tis_variable_str(type.id) > 0) {
    std::vector<const char*> p(n, text.c_str());
    H5Dwrite(ds.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data());
    return;
  }
  const size_t width = H5Tget_size(type.id);
  std::string buf(width * n, '\0');
  for (hsize_t i = 0; i < n; ++i) buf.replace(i * width, std::min(width, text.size()), text.substr(0, width));
  H5Dwrite(ds.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
}

struct Written {
  int64_t world_size = 1;
};

Written write_checkpoint(FuzzedDataProvider& fdp, const std::string& path, const std::string& other_file) {
  Written w;
  H5Obj file(create_file(fdp, path), H5Fclose);
  if (!file.ok()) finding("cannot create " + path);
  const hid_t f = file.id;
  // Decided first (while the input lasts): links, cycles and committed types added at the end.
  const int hostile = fdp.ConsumeIntegralInRange<int>(0, 7) >= 5 ? fdp.ConsumeIntegralInRange<int>(1, 2) : 0;
  w.world_size = 1 + fdp.ConsumeIntegralInRange<int64_t>(0, 2);
  fuzz_string_attr(fdp, f, "format", {checkpoint::kFormatName, "hpctrain-dataset"});
  fuzz_string_attr(fdp, f, "run_id", {"fuzz-run", ""});
  fuzz_number_attr(fdp, f, "format_version", checkpoint::kFormatVersion);
  fuzz_string_attr(fdp, f, "hpctrain_version", {"0.1.0"});
  fuzz_string_attr(fdp, f, "torch_version", {"2.11.0"});
  fuzz_number_attr(fdp, f, "world_size", w.world_size);
  fuzz_string_attr(fdp, f, "time", {"2025-01-01T00:00:00Z"});
  fuzz_number_attr(fdp, f, "step", 10);
  write_config(fdp, f, "config");
  // /state values: 1-element checksummed datasets, int64 or float64.
  for (const char* k : {"state/step", "state/loader/epoch", "state/tokens_seen"})
    write_tensor(fdp, f, k, {1}, H5T_STD_I64LE);
  write_tensor(fdp, f, "state/lr", {1}, H5T_IEEE_F64LE);
  // The model of the expectation below, its optimizer state, and tensors of other kinds.
  write_tensor(fdp, f, "model/wte.weight", {5, 2}, H5T_IEEE_F32LE);
  write_tensor(fdp, f, "model/ln.bias", {2}, H5T_IEEE_F32LE);
  write_tensor(fdp, f, "model_buffers/mask", {2, 2}, H5T_IEEE_F32LE);
  static const hid_t kDtypes[] = {H5T_IEEE_F32LE, H5T_IEEE_F64LE, H5T_STD_I64LE, H5T_STD_I32LE,
                                  H5T_STD_I16LE,  H5T_STD_I8LE,   H5T_STD_U8LE,  H5T_STD_U16LE};
  const int extra = fdp.ConsumeIntegralInRange<int>(0, 3);
  for (int i = 0; i < extra; ++i) {
    const std::string key = fuzz_string(fdp, {"optimizer/exp_avg/wte.weight", "optimizer/exp_avg_sq/ln.bias",
                                              "optimizer/step/wte.weight", "optimizer/bogus", "optimizer/exp_avg/nope",
                                              "model/extra.weight", "local_sgd/outer/wte.weight", "misc/x"});
    std::vector<hsize_t> dims(fdp.ConsumeIntegralInRange<size_t>(0, 3));
    for (auto& d : dims) d = fdp.ConsumeIntegralInRange<hsize_t>(0, 5);
    if (key.rfind("optimizer/exp_avg/wte", 0) == 0 && fdp.ConsumeBool()) dims = {5, 2};
    write_tensor(fdp, f, key, dims, kDtypes[fdp.ConsumeIntegralInRange<size_t>(0, 7)]);
  }
  // Per-rank groups /rank/0 .. /rank/<world-1>, and hostile rank names.
  for (int64_t r = 0; r < w.world_size; ++r) {
    const std::string g = "rank/" + std::to_string(r);
    H5Obj lcpl = lcpl_intermediate();
    switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
      case 6: break;  // missing
      case 7: write_tensor(fdp, f, g, {3}, H5T_STD_U8LE); break;  // a dataset instead of a group
      default: {
        H5Obj grp(H5Gcreate2(f, g.c_str(), lcpl.id, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        if (fdp.ConsumeBool()) write_tensor(fdp, f, g + "/rng/cpu", {16}, H5T_STD_U8LE);
        if (fdp.ConsumeIntegralInRange<int>(0, 3) == 3)
          write_tensor(fdp, f, g + "/optimizer/exp_avg/wte.weight", {5, 2}, H5T_IEEE_F32LE);
      }
    }
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 3) {
    const std::string g = "rank/" + fuzz_string(fdp, {"99999999999999999999999", "-1", "x", "01", "3", ""});
    write_tensor(fdp, f, g + "/rng/cpu", {4}, H5T_STD_U8LE);
  }
  for (int i = 0; i < hostile; ++i)
    fuzz_hostile_object(fdp, f, fuzz_string(fdp, {"model/wte.weight", "rank/0/rng", "state/step", "x"}), other_file);
  return w;
}

bool copy_file(const std::string& from, const std::string& to, int64_t truncate_to) {
  const int in = ::open(from.c_str(), O_RDONLY);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  bool ok = in >= 0 && out >= 0;
  char buf[65536];
  int64_t done = 0;
  for (ssize_t n; ok && (n = ::read(in, buf, sizeof(buf))) > 0;) {
    const ssize_t keep = truncate_to >= 0 ? std::min<int64_t>(n, truncate_to - done) : n;
    if (keep > 0 && ::write(out, buf, static_cast<size_t>(keep)) != keep) ok = false;
    done += keep > 0 ? keep : 0;
  }
  if (in >= 0) ::close(in);
  if (out >= 0) ::close(out);
  return ok;
}

// The `latest` + directory listing path: the checkpoint under a name from the input, maybe a
// truncated copy under another, maybe a directory with a checkpoint's name, and `latest` text.
void load_latest(FuzzedDataProvider& fdp, const std::string& file, comm::Communicator& comm) {
  const std::string dir = scratch_dir() + "/ckpts";
  ::mkdir(dir.c_str(), 0755);
  clear_dir(dir);
  const std::vector<std::string> names = {"ckpt-00000010.h5", "ckpt-00000009.h5", "ckpt-99999999999999999999999.h5",
                                          "ckpt-.h5", "ckpt-00000010.h5.tmp", "latest"};
  const std::string name = fuzz_string(fdp, names);
  if (name.find('/') == std::string::npos && !name.empty()) copy_file(file, dir + "/" + name, -1);
  if (fdp.ConsumeBool()) {
    const std::string second = fuzz_string(fdp, {"ckpt-00000011.h5", "ckpt-00000009.h5", "ckpt-1.h5"});
    if (second.find('/') == std::string::npos && !second.empty())
      copy_file(file, dir + "/" + second, fdp.ConsumeIntegralInRange<int64_t>(0, 4096));
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 7) ::mkdir((dir + "/ckpt-00000012.h5").c_str(), 0755);
  if (fdp.ConsumeIntegralInRange<int>(0, 3) != 0) {
    const std::string latest = fuzz_string(fdp, {name + "\n", "ckpt-00000011.h5\n", "../ckpt-00000010.h5\n",
                                                 "ckpt-00000012.h5", "\n", "ckpt-99999999999999999999999.h5"});
    const int fd = ::open((dir + "/latest").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)::write(fd, latest.data(), latest.size());
      ::close(fd);
    }
  }
  checkpoint::Manager m(dir, 2, comm);
  only_ht_errors("Manager::load_latest", [&] { (void)m.load_latest(); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  quiet_process();
  static const std::unique_ptr<comm::Communicator> comm = comm::make_local();
  static const std::string other = [] {  // target of external links: a valid checkpoint
    const std::string p = scratch_dir() + "/other.h5";
    FuzzedDataProvider none(nullptr, 0);
    write_checkpoint(none, p, p);
    return p;
  }();
  FuzzedDataProvider fdp(data, size);
  const std::string path = scratch_dir() + "/ckpt.h5";
  const Written w = write_checkpoint(fdp, path, other);

  try {
    (void)checkpoint::verify(path);
  } catch (const std::exception& e) {
    finding(std::string("verify threw: ") + e.what());
  }
  only_ht_errors("describe", [&] { (void)checkpoint::describe(path); });
  only_ht_errors("is_checkpoint_file", [&] { (void)checkpoint::is_checkpoint_file(path); });
  only_ht_errors("read_config_text", [&] {
    const std::string text = checkpoint::read_config_text(path);
    (void)config::load_text(text, path, {});
  });
  checkpoint::Snapshot s;
  const int rank = fdp.ConsumeIntegralInRange<int>(0, 4);
  if (only_ht_errors("read_file", [&] { s = checkpoint::read_file(path, rank); })) {
    // A file fits the model made of its own tensors: check_compatible must accept it.
    checkpoint::Expectation own;
    for (const auto& [k, t] : s.tensors) {
      if (k.rfind("model/", 0) == 0) own.params[k.substr(6)] = t;
      if (k.rfind("model_buffers/", 0) == 0) own.buffers[k.substr(14)] = t;
    }
    try {
      checkpoint::check_compatible(s, own);
    } catch (const std::exception& e) {
      finding(std::string("a checkpoint does not fit the model of its own tensors: ") + e.what());
    }
    // And the model of the expectation a run would have, optimizer state included.
    checkpoint::Expectation want;
    want.params["wte.weight"] = torch::zeros({5, 2});
    want.params["ln.bias"] = torch::zeros({2});
    want.buffers["mask"] = torch::zeros({2, 2});
    want.optimizer = fdp.ConsumeBool();
    want.moments_per_rank = fdp.ConsumeBool();
    only_ht_errors("check_compatible", [&] { checkpoint::check_compatible(s, want); });
  }
  (void)w;
  load_latest(fdp, path, *comm);
  return 0;
}
