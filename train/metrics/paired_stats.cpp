// Replicate summaries and paired t intervals (see paired_stats.h).
#include "train/metrics/paired_stats.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "train/metrics/json_number.h"

namespace dark::metrics {
namespace {

// The continued fraction of the regularised incomplete beta function I_x(a, b), evaluated by
// the modified Lentz method; converges fast for x < (a + 1) / (a + b + 2).
double beta_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  d = 1 / (std::abs(d) < kTiny ? kTiny : d);
  double f = d;
  for (int m = 1; m <= 300; ++m) {
    for (const bool even : {true, false}) {
      const double numerator = even ? m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
                                    : -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
      d = 1 + numerator * d;
      d = 1 / (std::abs(d) < kTiny ? kTiny : d);
      c = 1 + numerator / c;
      if (std::abs(c) < kTiny) c = kTiny;
      f *= c * d;
      if (!even && std::abs(c * d - 1) < 1e-15) return f;
    }
  }
  return f;
}

// I_x(a, b).
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(log_front) * beta_fraction(a, b, x) / a;
  return 1 - std::exp(log_front) * beta_fraction(b, a, 1 - x) / b;
}

// P(T <= t) for Student's t with df degrees of freedom.
double student_t_cdf(double t, int df) {
  const double tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
  return t >= 0 ? 1 - tail : tail;
}

}  // namespace

Replicates summarize(const std::vector<double>& values) {
  Replicates r;
  double sum = 0;
  for (const double v : values)
    if (std::isfinite(v)) sum += v, ++r.n;
  r.mean = r.n ? sum / r.n : kNaN;
  if (r.n < 2) {
    r.sd = kNaN;
    return r;
  }
  double squares = 0;
  for (const double v : values)
    if (std::isfinite(v)) squares += (v - r.mean) * (v - r.mean);
  r.sd = std::sqrt(squares / (r.n - 1));
  return r;
}

double student_t_quantile(double p, int df) {
  DARK_CHECK(p > 0 && p < 1 && df >= 1, "student_t_quantile: expected 0 < p < 1 and df >= 1, got p = ", p, ", df = ", df);
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  // Bisection on the CDF: monotone, and 200 halvings of [0, 1e6] reach double precision.
  double lo = 0, hi = 1e6;
  for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; ++i) {
    const double mid = (lo + hi) / 2;
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

PairedDifference paired_difference(const std::vector<double>& a, const std::vector<double>& b, double confidence) {
  DARK_CHECK(a.size() == b.size(), "paired_difference: ", a.size(), " values against ", b.size());
  DARK_CHECK(confidence > 0 && confidence < 1, "paired_difference: confidence must lie in (0, 1), got ", confidence);
  std::vector<double> differences;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) && std::isfinite(b[i])) differences.push_back(a[i] - b[i]);
  const Replicates r = summarize(differences);
  PairedDifference d;
  d.n = r.n;
  d.mean = r.mean;
  d.sd = r.sd;
  if (r.n < 2) {
    d.low = d.high = kNaN;
    return d;
  }
  const double half = student_t_quantile(0.5 + confidence / 2, r.n - 1) * r.sd / std::sqrt(static_cast<double>(r.n));
  d.low = r.mean - half;
  d.high = r.mean + half;
  return d;
}

}  // namespace dark::metrics
