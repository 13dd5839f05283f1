// core/portable_math.h: its log, sin and cos against long double (the platform's libm at
// 64 or more significant bits, an independent reference), exact values where there are
// any, and the same bits when the compiler may contract a * b + c into FMAs
// (tests/portable_math_contracted.cpp), as nvcc does on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "core/portable_math.h"
#include "tests/portable_math_contracted.h"

namespace dark {
namespace {

// |got - want| in units of the last place of want rounded to double.
double ulps(double got, long double want) {
  const double w = std::fabs(static_cast<double>(want));
  const double ulp = w == 0 ? std::numeric_limits<double>::denorm_min() : std::nextafter(w, INFINITY) - w;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

// sin(2 pi n / 2^32) in long double, reduced independently of the implementation: y = n / 2^32
// (exact), k the nearest multiple of 1/2, sin(2 pi y) = (-1)^k sin(2 pi (y - k/2)).
long double sin_turns_reference(std::uint32_t n) {
  const long double two_pi = 6.283185307179586476925286766559005768L;
  const long double y = static_cast<long double>(n) / 4294967296.0L;
  const long double k = std::nearbyint(2 * y);
  const long double s = std::sin(two_pi * (y - k / 2));
  return static_cast<long long>(k) % 2 ? -s : s;
}

// Box-Muller's inputs, (n + 1) / 2^32, and logs of every magnitude from 1e-300 to 1e300.
TEST(PortableMath, LogIsWithinOneUlp) {
  std::mt19937_64 rng(7);
  double worst = 0, worst_at = 0;
  auto check = [&](double x) {
    const double e = ulps(portable::log_positive(x), std::log(static_cast<long double>(x)));
    if (e > worst) worst = e, worst_at = x;
  };
  for (int i = 0; i < 500000; ++i) check((static_cast<double>(static_cast<std::uint32_t>(rng())) + 1.0) / 4294967296.0);
  for (int i = 0; i < 500000; ++i) check(std::exp(std::uniform_real_distribution<double>(-690, 690)(rng)));
  for (double x : {1.0, 2.0, 0.5, 1.0 / 4294967296.0, std::sqrt(2.0), std::nextafter(std::sqrt(2.0), 0.0),
                   std::nextafter(1.0, 0.0), std::nextafter(1.0, 2.0), 1e-300, 1e300})
    check(x);
  EXPECT_LE(worst, 1.0) << "at x = " << worst_at;
  EXPECT_EQ(portable::log_positive(1.0), 0.0);
}

TEST(PortableMath, SinAndCosOfTurnsAreWithinOneAndAHalfUlp) {
  std::mt19937_64 rng(8);
  double worst_sin = 0, worst_cos = 0;
  std::uint32_t sin_at = 0, cos_at = 0;
  auto check = [&](std::uint32_t n) {
    const double es = ulps(portable::sin_turns(n), sin_turns_reference(n));
    const double ec = ulps(portable::cos_turns(n), sin_turns_reference(n + (1u << 30)));
    if (es > worst_sin) worst_sin = es, sin_at = n;
    if (ec > worst_cos) worst_cos = ec, cos_at = n;
  };
  for (int i = 0; i < 1000000; ++i) check(static_cast<std::uint32_t>(rng()));
  // Around every eighth of a turn, where the reduction switches branch, and the extremes.
  for (std::uint32_t eighth = 0; eighth < 8; ++eighth)
    for (std::int64_t d = -300; d <= 300; ++d) check(static_cast<std::uint32_t>((eighth << 29) + d));
  EXPECT_LE(worst_sin, 1.5) << "at n = " << sin_at;
  EXPECT_LE(worst_cos, 1.5) << "at n = " << cos_at;
}

TEST(PortableMath, ExactValuesAreExact) {
  EXPECT_EQ(portable::sin_turns(0), 0.0);
  EXPECT_EQ(portable::cos_turns(0), 1.0);
  EXPECT_EQ(portable::sin_turns(1u << 30), 1.0);
  EXPECT_EQ(portable::cos_turns(1u << 31), -1.0);
  EXPECT_EQ(portable::sin_turns(3u << 30), -1.0);
  EXPECT_EQ(portable::sqrt(2.0), std::sqrt(2.0));
}

// The same bits from a build that contracts a * b + c into FMAs wherever it can (nvcc's
// default for device code; GCC's wherever the target has FMA).
TEST(PortableMath, FmaContractionChangesNoBit) {
#if defined(__x86_64__) || defined(__i386__)
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no FMA: the contracted build cannot run";
#endif
  // Control: that build does contract (a x + y = 2^-60 exactly, but 0 when a x is rounded first).
  const double a = 1 + 0x1p-30, x = 1 - 0x1p-30;
  ASSERT_NE(portable_math_contracted::axpy_plain(a, x, -1), portable::add(portable::mul(a, x), -1))
      << "tests/portable_math_contracted.cpp was not compiled with FMA contraction: this test would prove nothing";
  EXPECT_EQ(portable_math_contracted::axpy_portable(a, x, -1), portable::add(portable::mul(a, x), -1));
  std::mt19937_64 rng(9);
  for (int i = 0; i < 300000; ++i) {
    const auto n = static_cast<std::uint32_t>(rng());
    const double u = (static_cast<double>(n) + 1.0) / 4294967296.0;
    ASSERT_EQ(portable_math_contracted::log_positive(u), portable::log_positive(u)) << "u = " << u;
    ASSERT_EQ(portable_math_contracted::sin_turns(n), portable::sin_turns(n)) << "n = " << n;
    ASSERT_EQ(portable_math_contracted::cos_turns(n), portable::cos_turns(n)) << "n = " << n;
  }
}

}  // namespace
}  // namespace dark
