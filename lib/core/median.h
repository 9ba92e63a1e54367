// The median of a sample of timings: robust to one slow or one lucky repeat.
#pragma once
#include <algorithm>
#include <vector>

namespace ht {

// The middle value (the mean of the two middle values for an even count); 0 for an empty sample.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace ht
