// The Wilson score interval of a binomial proportion (k successes in n trials): the interval the
// recall tasks give each accuracy with. Unlike the normal approximation p +- z sqrt(p(1-p)/n),
// it stays inside [0, 1] and is not empty at 0/n or n/n, where a few trials per cell often land.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace dark::train {

struct ProportionInterval {
  double low = 0, high = 0;  // NaN for n = 0
};

// z = 1.959964: the two-sided 95% normal quantile.
inline ProportionInterval wilson_interval(std::int64_t k, std::int64_t n, double z = 1.959963984540054) {
  if (n <= 0) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  const double nn = static_cast<double>(n), p = static_cast<double>(k) / nn, z2 = z * z;
  const double denominator = 1 + z2 / nn;
  const double center = (p + z2 / (2 * nn)) / denominator;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denominator;
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

}  // namespace dark::train
