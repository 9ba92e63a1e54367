// The learning-rate schedule (linear warmup, then cosine, linear or constant) and global-norm
// gradient clipping: the pieces every optimizer step uses, in the Trainer and in hand-written loops.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "config/config.h"

namespace ht::train {

// Linear warmup to lr, then cosine or linear decay to min_lr at total_steps (or constant).
class LrSchedule {
 public:
  LrSchedule(const config::TrainConfig& cfg, int64_t total_steps);
  double lr_at(int64_t step) const;  // step = optimizer steps already taken
  // Sets every param group's lr for the given step and returns it.
  double apply(torch::optim::Optimizer& opt, int64_t step) const;

 private:
  config::LrScheduleKind kind_;
  double lr_, min_lr_;
  int64_t warmup_, total_;
};

// Sum of squares of the gradients' elements (fp32 norms per tensor, combined in double). The
// grads may be shards of the full gradient: their sums add up across ranks.
double grad_norm_squared(const std::vector<torch::Tensor>& grads);
// Scales the gradients to max_norm when total_norm exceeds it (max_norm <= 0: no clipping).
void clip_to_norm(const std::vector<torch::Tensor>& grads, double total_norm, double max_norm);
// Global L2 norm of all gradients of the model; scales them to max_norm when above.
double clip_grad_norm(torch::nn::Module& model, double max_norm);

}  // namespace ht::train
