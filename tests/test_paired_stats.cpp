// Replicate statistics for reports (train/metrics/paired_stats.h): Student t quantiles against
// values computed with mpmath (30 digits: the root of 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2 = p;
// closed forms for df = 1 and 2), summaries with NaN left out, and paired intervals
// checked by hand: a consistent small difference is distinguishable, a noisy larger one is not.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/metrics/json_number.h"
#include "train/metrics/paired_stats.h"

namespace dark::metrics {
namespace {

TEST(PairedStats, StudentTQuantilesMatchAnArbitraryPrecisionReference) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706204736174696, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.302652729749462, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 3), 3.1824463052837084, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 4), 2.7764451051977935, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 10), 2.2281388519862742, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0422724563012379, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.95, 5), 2.0150483733330235, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.995, 2), 9.924843200918287, 1e-8);
  EXPECT_NEAR(student_t_quantile(0.025, 2), -4.302652729749462, 1e-9);  // symmetric
  EXPECT_THROW(student_t_quantile(1.0, 3), std::exception);
}

TEST(PairedStats, SummariesLeaveNaNOut) {
  const Replicates r = summarize({1.0, 2.0, kNaN, 4.0});
  EXPECT_EQ(r.n, 3);
  EXPECT_DOUBLE_EQ(r.mean, 7.0 / 3);
  EXPECT_NEAR(r.sd, std::sqrt(((1 - 7.0 / 3) * (1 - 7.0 / 3) + (2 - 7.0 / 3) * (2 - 7.0 / 3) + (4 - 7.0 / 3) * (4 - 7.0 / 3)) / 2),
              1e-15);
  EXPECT_TRUE(std::isnan(summarize({5.0}).sd));
  EXPECT_TRUE(std::isnan(summarize({}).mean));
}

TEST(PairedStats, PairedIntervalsSeparateConsistentDifferencesFromNoise) {
  // Differences 0.10, 0.12, 0.11: mean 0.11, sd 0.01, half width 4.3027 x 0.01 / sqrt(3) = 0.02484.
  const PairedDifference d = paired_difference({3.10, 3.32, 2.91}, {3.00, 3.20, 2.80});
  EXPECT_EQ(d.n, 3);
  EXPECT_NEAR(d.mean, 0.11, 1e-12);
  EXPECT_NEAR(d.sd, 0.01, 1e-12);
  EXPECT_NEAR(d.low, 0.11 - 0.024841, 1e-5);
  EXPECT_NEAR(d.high, 0.11 + 0.024841, 1e-5);
  EXPECT_TRUE(d.distinguishable());
  // Differences 0.3, -0.1, 0.2: mean 0.133 but sd 0.208: the interval [-0.38, 0.65] holds zero.
  const PairedDifference noisy = paired_difference({1.3, 0.9, 1.2}, {1.0, 1.0, 1.0});
  EXPECT_FALSE(noisy.distinguishable());
  EXPECT_LT(noisy.low, 0);
  // One pair: no interval.
  const PairedDifference one = paired_difference({1.0, kNaN}, {0.5, 0.4});
  EXPECT_EQ(one.n, 1);
  EXPECT_TRUE(std::isnan(one.low));
  EXPECT_FALSE(one.distinguishable());
}

}  // namespace
}  // namespace dark::metrics
