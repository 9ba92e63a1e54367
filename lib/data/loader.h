// Distributed, prefetching sample loader over one split of a dataset, and the evaluation reader.
//
// Samples: causal-lm sample i = tokens[i*seq_len, i*seq_len + seq_len + 1) (input = first seq_len,
// target = last seq_len); classification sample i = row i of input_ids / labels.
// Order: a permutation of global sample indices from (seed, epoch) (identity if shuffle = false).
// A global batch of G = world * grad_accum * micro_batch samples takes permutation positions
// [b*G, (b+1)*G); micro-step m of rank r takes the micro_batch positions starting at
// b*G + (m*world + r)*micro_batch. The set of samples per global batch therefore does not depend
// on the rank count. The remainder of an epoch (< G samples) is dropped.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/batch.h"
#include "data/dataset.h"

namespace ht::data {

// Position in the sample stream: enough to continue the exact sequence after a restart.
struct LoaderState {
  int64_t seed = 0;
  int64_t epoch = 0;
  int64_t samples_consumed = 0;  // global samples consumed in this epoch (multiple of G at step boundaries)
};

struct LoaderOptions {
  std::string split = "train";  // "train" | "val"
  int64_t seq_len = 0;          // causal-lm context; classification: must equal the file's width or less
  int64_t micro_batch = 1;      // per rank
  int64_t grad_accum = 1;
  bool shuffle = true;
  int64_t seed = 0;
  int64_t prefetch = 4;         // batches read ahead on a background thread (0 = read in next())
  int64_t model_vocab_size = 0;       // > 0: fail at open when the file's vocab_size exceeds it
  size_t cache_bytes = 256u << 20;    // verified-chunk cache of this rank's reader

  // The training loader of a run: model.seq_len, train.micro_batch_size / grad_accum_steps,
  // data.shuffle / seed / prefetch_batches, model.vocab_size.
  static LoaderOptions from_config(const config::Config& cfg);
};

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> data, const LoaderOptions& opts, comm::Communicator& comm);
  ~Loader();
  // Next micro-batch of this rank. Crosses epoch boundaries by itself.
  Batch next();
  LoaderState state() const;        // at the last returned micro-batch
  void restore(const LoaderState& s);
  int64_t epoch() const;
  int64_t samples_per_epoch() const;  // global samples in the split
  int64_t steps_per_epoch() const;    // optimizer steps (global batches) per epoch
  const DatasetMeta& meta() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Evaluation reader: rank r reads the contiguous shard [r*N/W, (r+1)*N/W) of the split in order,
// so every sample is evaluated exactly once over all ranks.
class EvalReader {
 public:
  // max_samples > 0: only a seeded random subset of that many samples of the split (the same
  // global samples for any rank count: data::eval_subset, then split across ranks); 0 = all.
  EvalReader(std::shared_ptr<const Dataset> data, const std::string& split, int64_t seq_len, int64_t batch,
             comm::Communicator& comm, int64_t max_samples = 0, int64_t seed = 0);
  ~EvalReader();
  // False when this rank's shard is exhausted (max_batches = 0: no limit).
  bool next(Batch& out);
  void rewind();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ht::data
