// Scalar math written so that GCC vectorises loops calling it (`#pragma omp simd`):
// no calls into libm, branch-free selects. float versions use Cephes-style polynomials
// (relative error ~1e-7, i.e. a few ulp); double versions call libm, since double is
// used for gradchecks where accuracy matters more than speed.
// Special values: exp(-inf) = 0, exp(+inf) = inf, log(0) = -inf, log(x<0) = NaN, NaN in NaN out.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#define DARK_INLINE [[gnu::always_inline]] inline

namespace dark::cpu::vmath {

// exp for x in [-87.5, 88.72] (callers clamp or know their range); NaN propagates.
// kNonPositive: the caller guarantees x <= 0, which skips the n = 128 case (faster).
template <bool kNonPositive = false>
DARK_INLINE float exp_in_range(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  const float n = std::floor(x * kLog2e + 0.5f);
  const float r = x - n * 0.693359375f - n * -2.12194440e-4f;  // ln 2 split hi/lo
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  if constexpr (kNonPositive) return y * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
  // 2^n, with n = 128 (x just below ln FLT_MAX) taken as 2^127 * 2 to stay finite.
  const float n_low = n > 127.0f ? 127.0f : n;
  const float scale = std::bit_cast<float>((static_cast<std::int32_t>(n_low) + 127) << 23);
  return y * scale * (1.0f + (n - n_low));
}

DARK_INLINE float exp(float x) {
  const float xc = x < -87.5f ? -87.5f : (x > 88.5f ? 88.5f : x);
  const float result = exp_in_range(xc);
  const float big = x > 88.72283935546875f ? std::numeric_limits<float>::infinity() : result;
  const float small = x < -87.5f ? 0.0f : big;
  return x != x ? x : small;
}

DARK_INLINE float log(float x) {
  const std::int32_t bits = std::bit_cast<std::int32_t>(x);
  float e = static_cast<float>(((bits >> 23) & 0xff) - 126);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // mantissa in [0.5, 1)
  const bool below = m < 0.707106781186547524f;
  e = below ? e - 1.0f : e;
  m = below ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += e * -2.12194440e-4f;
  y += -0.5f * z;
  float r = m + y + e * 0.693359375f;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  r = x == 0.0f ? -std::numeric_limits<float>::infinity() : r;
  r = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : r;
  // Subnormal inputs (< 2^-126) are not worth a slow path: use libm's answer shape.
  r = (x > 0.0f && x < 1.17549435e-38f) ? -87.33654475f + (x - x) : r;
  return x != x ? x : r;
}

DARK_INLINE float tanh(float x) {
  const float ax = std::fabs(x);
  // Small |x|: odd polynomial keeps relative accuracy where 1 - 2/(e^2x + 1) cancels.
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float large = 1.0f - 2.0f / (exp(2.0f * ax) + 1.0f);
  return ax < 0.625f ? small : std::copysign(large, x);
}

DARK_INLINE float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// erfc with relative error < 1.2e-7 over the whole line (Numerical Recipes' erfcc),
// so gelu keeps relative accuracy deep in the negative tail.
DARK_INLINE float erfc(float x) {
  const float z = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  // The exponent is below 0 for every z >= 0, and below -87.5 erfc underflows to 0.
  const float e = -z * z + p;
  const float ans = e < -87.5f ? 0.0f : t * exp_in_range<true>(e);
  return x >= 0.0f ? ans : 2.0f - ans;
}

DARK_INLINE double exp(double x) { return std::exp(x); }
DARK_INLINE double log(double x) { return std::log(x); }
DARK_INLINE double tanh(double x) { return std::tanh(x); }
DARK_INLINE double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
DARK_INLINE double erfc(double x) { return std::erfc(x); }

}  // namespace dark::cpu::vmath
