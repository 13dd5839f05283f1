// Statistics over seeds for sweep reports: mean and standard deviation of replicates, and the
// paired comparison of two methods run with the same seeds (same data order and initial
// weights), with a Student t confidence interval on the mean difference. A difference is
// called a difference only when its interval excludes zero.
#pragma once
#include <vector>

namespace dark::metrics {

struct Replicates {
  int n = 0;          // finite values
  double mean = 0;    // NaN when n = 0
  double sd = 0;      // sample standard deviation (n - 1); NaN when n < 2
};
Replicates summarize(const std::vector<double>& values);  // NaN values are left out

// The p-quantile (0 < p < 1) of Student's t distribution with `df` >= 1 degrees of freedom.
double student_t_quantile(double p, int df);

struct PairedDifference {
  int n = 0;              // pairs where both values are finite
  double mean = 0;        // mean of a - b
  double sd = 0;          // sample sd of a - b
  double low = 0, high = 0;  // the confidence interval of the mean difference (NaN when n < 2)
  // True when the interval excludes zero (n >= 2).
  bool distinguishable() const { return n >= 2 && (low > 0 || high < 0); }
};
// a[i] and b[i] are the same seed's values of two methods.
PairedDifference paired_difference(const std::vector<double>& a, const std::vector<double>& b, double confidence = 0.95);

}  // namespace dark::metrics
