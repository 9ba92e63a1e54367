#include "train/metrics.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/timer.h"

namespace ht::train {

MetricsWriter::MetricsWriter(const std::string& path, bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  out_.open(path, std::ios::app);
  HT_REQUIRE(out_.good(), ExitCode::kData, "{}: cannot open metrics file for writing", path);
}

void MetricsWriter::write(const nlohmann::json& line) {
  if (!enabled_) return;
  out_ << line.dump() << '\n';
  out_.flush();
}

double measure_peak_flops(const torch::Device& device) {
  const int64_t n = device.is_cuda() ? 4096 : 1024;
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  torch::mm(a, b);  // warm-up
  sync();
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    int iters = 0;
    Stopwatch sw;
    do {
      torch::mm(a, b);
      ++iters;
      sync();
    } while (sw.seconds() < 0.1);
    rates.push_back(2.0 * static_cast<double>(n) * n * n * iters / sw.seconds());
  }
  // The best run: on a shared machine slower runs measure the neighbours, not the hardware.
  return *std::max_element(rates.begin(), rates.end());
}

}  // namespace ht::train
