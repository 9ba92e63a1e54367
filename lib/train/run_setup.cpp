#include "train/run_setup.h"

#include <torch/cuda.h>
#include <torch/utils.h>

#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "train/train_step.h"

namespace ht::train {

namespace {

// bf16 autocast on a CPU that lacks native bf16 runs emulated, several times slower than fp32.
void check_precision(const config::Config& cfg) {
  if (cfg.train.autocast != config::Autocast::kBf16 || cfg.train.autocast_emulated) return;
  const bool cpu = cfg.train.device == config::Device::kCpu ||
                   (cfg.train.device == config::Device::kAuto && !torch::cuda::is_available());
  HT_REQUIRE(!cpu || cpu_has_native_bf16(), ExitCode::kUsage,
             "config key 'train.autocast': bf16 on this CPU would be emulated (ATen reports neither AVX512-BF16 nor "
             "AMX-BF16), slower than fp32; use train.autocast = none, or set train.autocast_emulated = true");
}

}  // namespace

RunSetup resolve_run(const config::Config& in) {
  RunSetup s;
  s.cfg = in;
  config::Config& cfg = s.cfg;
  // The resolved config, which checkpoints store, lists the absolute files the entries matched:
  // `eval`, `export` and `generate` of a checkpoint open the same data from any directory.
  s.data = data::open(cfg.data);
  cfg.data.paths = s.data->paths();
  const data::DatasetMeta& meta = s.data->meta();
  HT_REQUIRE(meta.task == cfg.model.task, ExitCode::kUsage, "model.task = {} but {} holds {} data",
             config::name_of(cfg.model.task), s.data->path(), config::name_of(meta.task));
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = meta.vocab_size;
  data::check_vocab(meta, cfg.model.vocab_size);  // the one vocabulary check (also used by the loader)
  if (meta.task == config::Task::kClassification) {
    const auto labels = static_cast<int64_t>(meta.label_names.size());
    if (cfg.model.num_labels == 0) cfg.model.num_labels = labels;
    HT_REQUIRE(cfg.model.num_labels == labels, ExitCode::kUsage, "model.num_labels = {} but {} has {} labels",
               cfg.model.num_labels, s.data->path(), labels);
    HT_REQUIRE(cfg.model.seq_len <= meta.seq_len, ExitCode::kUsage,
               "model.seq_len = {} exceeds the width {} of input_ids in {}", cfg.model.seq_len, meta.seq_len,
               s.data->path());
  }
  config::validate(cfg);
  check_precision(cfg);
  return s;
}

std::vector<fs::DirectoryLock> prepare_output_dirs(const config::Config& cfg, bool writes) {
  std::vector<fs::DirectoryLock> locks;
  fs::ensure_writable_dir(cfg.train.output_dir, "train.output_dir");
  if (!writes) return locks;
  fs::ensure_writable_dir(cfg.checkpoint_dir(), "checkpoint directory");
  locks.emplace_back(cfg.train.output_dir, "train.output_dir");
  if (fs::absolute_path(cfg.checkpoint_dir()) != fs::absolute_path(cfg.train.output_dir))
    locks.emplace_back(cfg.checkpoint_dir(), "checkpoint directory");
  return locks;
}

torch::Device select_device(const config::TrainConfig& cfg, comm::Communicator& comm) {
  const bool cuda = torch::cuda::is_available();
  HT_REQUIRE(!(cfg.device == config::Device::kCuda && !cuda), ExitCode::kUsage,
             "train.device = cuda but libtorch sees no CUDA device on {}", comm.hostname());
  const int64_t threads =
      cfg.threads > 0 ? cfg.threads
                      : std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()) / comm.local_size());
  torch::set_num_threads(static_cast<int>(threads));
  if (cfg.device != config::Device::kCpu && cuda) {
    const int n = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(comm.local_rank() % n));
  }
  return torch::Device(torch::kCPU);
}

}  // namespace ht::train
