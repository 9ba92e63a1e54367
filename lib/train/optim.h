// Optimizer pieces shared by the Trainer and hand-written loops: AdamW with GPT-2 style
// parameter groups (decay only on matmul weights), the learning-rate schedule, and clipping.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "train/adamw.h"

namespace ht::train {

// Group 0: 2-D weights of Linear layers (decayed). Group 1: norms, biases, embeddings (not decayed).
// The kernel is train.optimizer_impl (train/adamw.h).
std::unique_ptr<AdamW> make_adamw(torch::nn::Module& model, const config::TrainConfig& cfg);

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

// Global L2 norm of all gradients; scales them to max_norm when above (max_norm <= 0: no clipping).
double clip_grad_norm(torch::nn::Module& model, double max_norm);

}  // namespace ht::train
