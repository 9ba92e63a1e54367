// Run metrics: metrics.jsonl (one JSON object per line, rank 0 only) and the peak FLOP/s figure
// that MFU is measured against.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <string>

namespace ht::train {

class MetricsWriter {
 public:
  // Appends to path (resume keeps earlier lines); enabled = false writes nothing (non-zero ranks).
  MetricsWriter(const std::string& path, bool enabled);
  void write(const nlohmann::json& line);

 private:
  std::ofstream out_;
  bool enabled_;
};

// Measures the FLOP/s of a square fp32 matmul on this device with the current thread count
// (best of 5 runs of ~0.1 s), as the MFU denominator when train.peak_flops = 0.
double measure_peak_flops(const torch::Device& device);

}  // namespace ht::train
