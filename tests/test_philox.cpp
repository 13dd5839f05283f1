// Philox4x32-10 against the published known-answer vectors (Random123's kat_vectors),
// and the statistics of the normal and uniform fills built on it.
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "core/tensor.h"

namespace dark {
namespace {

TEST(Philox, KnownAnswerVectors) {
  auto expect = [](philox::Block b, std::uint32_t a, std::uint32_t c, std::uint32_t d, std::uint32_t e) {
    EXPECT_EQ(b.v[0], a);
    EXPECT_EQ(b.v[1], c);
    EXPECT_EQ(b.v[2], d);
    EXPECT_EQ(b.v[3], e);
  };
  expect(philox::philox4x32_10(0, 0, 0, 0, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
  expect(philox::philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu),
         0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
  expect(philox::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u),
         0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Philox, NormalAndUniformStatistics) {
  const std::int64_t n = 1 << 20;
  const auto z = Tensor::randn({n}, 42, 3, DType::f64).to_vector<double>();
  double mean = 0, var = 0, kurt = 0;
  for (double v : z) mean += v;
  mean /= n;
  for (double v : z) var += (v - mean) * (v - mean), kurt += std::pow(v - mean, 4);
  var /= n;
  kurt /= n * var * var;
  // standard errors: mean 1/sqrt(n) ~ 1e-3, variance sqrt(2/n) ~ 1.4e-3, kurtosis sqrt(24/n) ~ 5e-3
  EXPECT_NEAR(mean, 0.0, 5e-3);
  EXPECT_NEAR(var, 1.0, 7e-3);
  EXPECT_NEAR(kurt, 3.0, 3e-2);
  const auto u = Tensor::rand({n}, 42, 3, DType::f64).to_vector<double>();
  double umean = 0, umin = 1, umax = 0;
  for (double v : u) umean += v, umin = std::min(umin, v), umax = std::max(umax, v);
  EXPECT_NEAR(umean / n, 0.5, 2e-3);
  EXPECT_GE(umin, 0.0);
  EXPECT_LT(umax, 1.0);
}

TEST(Philox, StreamsAreReproducibleAndIndependent) {
  const auto a = Tensor::randn({1000}, 1, 0).to_vector<float>();
  EXPECT_EQ(a, Tensor::randn({1000}, 1, 0).to_vector<float>());
  const auto b = Tensor::randn({1000}, 1, 1).to_vector<float>();
  const auto c = Tensor::randn({1000}, 2, 0).to_vector<float>();
  double ab = 0, ac = 0;
  for (int i = 0; i < 1000; ++i) ab += a[i] * b[i], ac += a[i] * c[i];
  EXPECT_LT(std::fabs(ab / 1000), 0.15);  // ~5 standard errors of a correlation
  EXPECT_LT(std::fabs(ac / 1000), 0.15);
  // A prefix of a longer fill equals the shorter fill: element i depends only on i.
  const auto longer = Tensor::randn({1003}, 1, 0).to_vector<float>();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), longer.begin()));
  // f32 fill is the f64 fill rounded.
  const auto d64 = Tensor::randn({1000}, 1, 0, DType::f64).to_vector<double>();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a[i], static_cast<float>(d64[i]));
}

}  // namespace
}  // namespace dark
