// One fragment of local SGD's parameter exchange: a contiguous range [begin, end) of the model's
// flat parameter layout (comm::ParamAverager over the tensors an exchange covers). This rank
// averages its part of the range (the whole range, or slice i of G for rank i of a group of the
// hierarchical mode) with the same part on every other group, over the cross-group communicator;
// the group then all-gathers the parts. The average is plain, or an outer step on the averaged
// pseudo-gradient (global - local): DiLoCo's Nesterov momentum, or, for int8/int4 exchanges of a
// plain average, outer lr 1 without momentum, so that what is quantized is the change since the
// last exchange and never the weights themselves.
// An exchange begins (blocking: completes at once) and, when overlapped, completes some steps
// later, adding (target - snapshot) to the local values so that the local progress made meanwhile
// is kept.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/param_averager.h"

namespace ht::train {

// DiLoCo's outer step on (global, momentum) with the averaged pseudo-gradient g:
// m = mu m + g; update = nesterov ? g + mu m : m; global -= lr * update (mu = 0: global -= lr g).
// The arithmetic is comm::outer_step's (one pass on CPUs, and the same on every rank).
struct OuterRule {
  double lr = 1.0, momentum = 0.0;
  bool nesterov = true;
  void apply(torch::Tensor& global, torch::Tensor& momentum_buf, const torch::Tensor& g) const;
  comm::OuterStepFactors factors() const;
};

struct FragmentSetup {
  comm::Communicator& world;  // every rank: the drift sum
  comm::Communicator& group;  // the ranks that share a replica (size 1 when flat)
  comm::Communicator& cross;  // this rank and its peers of the same part in the other groups
  comm::ParamAverager& layout;
  const std::vector<torch::Tensor>& tensors;  // the tensors of the layout (sync set)
  int64_t begin = 0, end = 0;                 // the fragment's range of the layout
  comm::AveragerOptions exchange;             // dtype, buckets, name
  bool outer = false;                         // keeps a global copy and applies an OuterRule
  OuterRule rule;
  // The layout itself is the exchange buffer (one fragment, one rank per group): no copy in or out,
  // and the tensors may live in it (bound) when exchanges are blocking.
  bool whole = false;
  bool consistency_check = true;
  bool overlapped = false;  // exchanges complete steps after they begin: a full snapshot of the local part is kept
};

class FragmentExchange {
 public:
  explicit FragmentExchange(const FragmentSetup& setup);
  ~FragmentExchange();

  // Takes this rank's part of the local values and starts their average (blocking: completes it).
  void begin(bool blocking);
  bool pending() const { return pending_; }
  // Drives a started average (no progress thread); never blocks.
  void progress();
  // Waits for a started average and applies it (overlapped: target - snapshot is added).
  void complete();
  // Outer copy := the current local values (after warmup, or on a resume on another rank count);
  // the momentum is zeroed unless keep_momentum.
  void reset_outer(bool keep_momentum = false);

  // Telemetry of the last completed exchange.
  // Sum over every rank of |local - mean|^2 of its part (the same on every rank): exact for
  // overlapped exchanges (they keep the whole local part); for blocking ones estimated from a fixed
  // 1/16 of each part (contiguous blocks of 1024 values, scaled up), so that a sync reads no full
  // copy of the parameters besides its exchange.
  double world_drift_squared() const { return world_drift_sq_; }
  uint64_t last_checksum() const { return checksum_; }
  uint64_t bytes_per_exchange() const { return xchg().bytes_per_call(); }
  int64_t staged_transfers() const { return xchg().staged_transfers(); }
  // What finish() would make of this fragment, written into `values` (a copy of the layout's flat
  // buffer): the average in flight applied, then, when local steps were taken since it began
  // (more_steps), one more blocking average. Collective within group and cross; changes nothing here.
  void average_into(torch::Tensor& values, bool more_steps);

  // Checkpoint state. The outer copy and momentum as this fragment's range of full-layout vectors
  // (identical on every rank); the part of an average in flight (this rank's own).
  void gather_outer(torch::Tensor& global_full, torch::Tensor& momentum_full);
  void restore_outer(const torch::Tensor& global_full, const torch::Tensor& momentum_full);
  std::map<std::string, torch::Tensor> pending_state();
  void restore_pending(const torch::Tensor& snapshot, const torch::Tensor& mean);
  // Values of this fragment that the state above carries (the layout without padding when whole).
  int64_t saved_numel() const;
  int64_t begin_offset() const { return setup_.begin; }
  int64_t end_offset() const { return setup_.end; }

 private:
  comm::ParamAverager& xchg() const { return setup_.whole ? setup_.layout : *own_; }
  torch::Tensor part_of(const torch::Tensor& full) const;  // this rank's part of a layout-sized buffer
  void take_local();                                     // xchg().flat()[0, part) := local part
  double drift_squared() const;
  bool tensors_in_flat() const;  // whole, and every tensor bound to the layout's buffer
  // Writes `part` (this rank's part of the result) into the fragment for the whole group; add: += it.
  void apply(const torch::Tensor& part, bool add);
  void gather_parts(const torch::Tensor& fragment) const;
  void finish_exchange(bool overlapped);
  void check_consistency(const torch::Tensor& target);
  int64_t* mean_bit_sum();  // where the next mean's bit sum goes (nullptr: the target is not the mean)

  FragmentSetup setup_;
  std::unique_ptr<comm::ParamAverager> own_;   // the part's exchange (not the whole layout)
  std::unique_ptr<comm::ParamAverager> view_;  // average_into's exchange: never touches own_'s data
  int64_t part_begin_ = 0, part_numel_ = 0;    // in the layout
  torch::Tensor sampled(const torch::Tensor& part) const;  // the drift sample's view of a part-sized buffer
  torch::Tensor snapshot_;                     // overlapped: local part at the start of the exchange
  torch::Tensor sample_;                       // blocking: the drift sample of the local part
  torch::Tensor drift_scratch_;                // blocking: the sample's difference from the mean
  double sample_scale_ = 1.0;                  // part values / sampled values
  torch::Tensor global_, momentum_;            // outer copy and momentum (part-sized)
  bool pending_ = false, mean_ready_ = false;
  double drift_sq_ = 0.0;        // this rank's part
  double world_drift_sq_ = 0.0;  // summed over every rank
  uint64_t checksum_ = 0;
  // The mean's bit sum from the exchange's own 1/W pass (plain averaging); absent: the checksum
  // reads the target itself (the outer copy, or a mean another call already waited for).
  std::optional<int64_t> mean_bit_sum_;
};

}  // namespace ht::train
