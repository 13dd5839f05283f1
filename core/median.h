// The median of a sample, for every place that reports one (benchmarks, stability analysis):
// the middle value, or the mean of the middle two for an even count; NaN for no values.
// Linear time (nth_element), on a copy.
#pragma once
#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace dark {

inline double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  if (values.size() % 2 == 1) return *mid;
  return (*std::max_element(values.begin(), mid) + *mid) / 2;
}

}  // namespace dark
