// Math whose bits do not depend on where it runs: the same results on the CPU, on a GPU and
// in the CUDA emulator, whatever the compiler's math library and whatever FMA contraction
// the compiler would do. What the Philox normals need (core/philox.h), so that random
// features, initial weights and dropout are the same bits on every device.
//
// Invariants:
// - Every product and sum is rounded on its own (IEEE round-to-nearest): on a GPU through
//   __dmul_rn / __dadd_rn, which nvcc never fuses into an FMA; on the host behind an empty
//   asm barrier, which the compiler cannot see through, so it cannot contract either (GCC
//   contracts a * b + c by default wherever the target has FMA). Division and square root
//   are correctly rounded on both sides.
// - No call into a math library: log, sin and cos are polynomials written here, each within
//   about 1 ulp of the exact value (tests/test_portable_math.cpp measures it against long
//   double: log 0.82, sin and cos 1.08 ulp at worst over millions of arguments).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace dark::portable {

// x, with the compiler unable to assume anything about how it was computed: on the host it
// cannot fuse the operation that made x with the one that uses it (the CUDA emulator's _rn
// intrinsics use it too). On a GPU the _rn intrinsics do that, and x passes unchanged.
template <class T>
DARK_HOST_DEVICE T opaque(T x) {
#if !defined(__CUDA_ARCH__)
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(x));
#elif defined(__aarch64__)
  __asm__("" : "+w"(x));
#else
  volatile T v = x;
  x = v;
#endif
#endif
  return x;
}

DARK_HOST_DEVICE double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return opaque(opaque(a) * opaque(b));
#endif
}
DARK_HOST_DEVICE double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return opaque(opaque(a) + opaque(b));
#endif
}
DARK_HOST_DEVICE double sub(double a, double b) { return add(a, -b); }
DARK_HOST_DEVICE double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return opaque(opaque(a) / opaque(b));
#endif
}
DARK_HOST_DEVICE double sqrt(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return opaque(std::sqrt(opaque(x)));
#endif
}

DARK_HOST_DEVICE std::uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}
DARK_HOST_DEVICE double double_of(std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// c[0] + z (c[1] + z (c[2] + ...)), N coefficients, by Horner.
template <int N>
DARK_HOST_DEVICE double horner(double z, const double (&c)[N]) {
  double p = c[N - 1];
  for (int i = N - 2; i >= 0; --i) p = add(c[i], mul(z, p));
  return p;
}

// Natural logarithm of a positive, finite, normal x.
// x = 2^k (1 + f) with sqrt(1/2) <= 1 + f < sqrt(2); with s = f / (2 + f),
// log(1 + f) = 2 atanh(s) = f - f^2/2 + s (f^2/2 + R), R = sum_{j >= 1} 2 s^(2j) / (2j + 1)
// (|s| <= 0.1716: ten terms leave < 2^-57 relative), and k log 2 is added as k ln2_hi
// (exact: ln2_hi has 21 trailing zero bits) plus k ln2_lo.
DARK_HOST_DEVICE double log_positive(double x) {
  constexpr double kSqrt2 = 1.4142135623730951;
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1;  // log 2 with its last 21 bits cleared
  constexpr double kLn2Lo = 1.9082149292705877e-10;  // log 2 - kLn2Hi
  constexpr double kR[10] = {0.6666666666666666,  0.4,                 0.2857142857142857,  // 2 / (2j + 1)
                             0.2222222222222222,  0.18181818181818182, 0.15384615384615385,
                             0.13333333333333333, 0.11764705882352941, 0.10526315789473684,
                             0.09523809523809523};
  const std::uint64_t b = bits_of(x);
  int k = static_cast<int>((b >> 52) & 0x7ff) - 1023;
  double m = double_of((b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);  // in [1, 2)
  if (m > kSqrt2) m = mul(m, 0.5), ++k;                                        // exact
  const double f = sub(m, 1.0);                                                 // exact (Sterbenz)
  const double s = div(f, add(2.0, f));
  const double z = mul(s, s);
  const double r = mul(z, horner(z, kR));
  const double hfsq = mul(mul(0.5, f), f);
  const double dk = static_cast<double>(k);
  const double tail = add(mul(s, add(hfsq, r)), mul(dk, kLn2Lo));
  return add(mul(dk, kLn2Hi), sub(f, sub(hfsq, tail)));
}

// sin(pi/4 y) and cos(pi/4 y) for y in [0, 1] with at most 30 significant bits (y = j / 2^29),
// by Taylor series in y (coefficients (pi/4)^i / i!; the first omitted term is below 2^-62 of
// the result). Written in y, not in an angle, so no rounded angle feeds the series; sin's
// leading term is split so that its larger part, (pi/4)_hi y, is exact (23 + 30 bits), and
// cos's 1 - b2 y^2 keeps the rounding error of its subtraction.
DARK_HOST_DEVICE double sin_eighth(double y) {
  constexpr double kPiOver4Hi = 0x1.921fb4p-1;            // pi/4 to 23 bits
  constexpr double kPiOver4Lo = 3.774894977445941e-08;    // pi/4 - kPiOver4Hi
  constexpr double kS[9] = {-0.08074551218828079,  0.0024903945701927202,  -3.657620418217725e-05,
                            3.1336168903781217e-07, -1.757247673443401e-09, 6.948453273886629e-12,
                            -2.0410263396641442e-14, 4.628704628834683e-17, -8.348589834811673e-20};
  const double z = mul(y, y);
  return add(mul(kPiOver4Hi, y), add(mul(kPiOver4Lo, y), mul(mul(y, z), horner(z, kS))));
}
DARK_HOST_DEVICE double cos_eighth(double y) {
  constexpr double kHalfB2 = 0.30842513753404244;  // (pi/4)^2 / 2
  constexpr double kC[8] = {0.015854344243815502, -0.00032599188692739,  3.59086044859151e-06,
                            -2.4611369504942e-08, 1.1501159127974052e-10, -3.8980731712596753e-13,
                            1.001886461636272e-15, -2.019653396886682e-18};
  const double z = mul(y, y);
  const double hz = mul(kHalfB2, z);
  const double w = sub(1.0, hz);
  const double w_error = sub(sub(1.0, w), hz);  // exact: 1 - hz's rounding error
  return add(w, add(w_error, mul(mul(z, z), horner(z, kC))));
}

// sin(2 pi n / 2^32): the angle reduced exactly in integers to a quadrant and an angle of
// at most pi/4 (sin and cos swap past pi/4 of a quadrant), then one short series.
DARK_HOST_DEVICE double sin_turns(std::uint32_t n) {
  constexpr std::uint32_t kQuarter = 1u << 30, kEighth = 1u << 29;
  const std::uint32_t quadrant = n >> 30, r = n & (kQuarter - 1);
  const bool past_eighth = r > kEighth;
  // Within the quadrant: sin(phi) (quadrants 0, 2) or cos(phi) (1, 3); past pi/4 each is
  // the other function of pi/2 - phi. y = (pi/4 of the quadrant's angle) / (pi/4), exact.
  const double y = static_cast<double>(past_eighth ? kQuarter - r : r) * (1.0 / kEighth);
  const bool use_cos = ((quadrant & 1) != 0) != past_eighth;
  const double v = use_cos ? cos_eighth(y) : sin_eighth(y);
  return quadrant >= 2 ? -v : v;
}
// cos(2 pi n / 2^32) = sin(2 pi (n + 2^30) / 2^32), the sum taken modulo 2^32 (exact).
DARK_HOST_DEVICE double cos_turns(std::uint32_t n) { return sin_turns(n + (1u << 30)); }

}  // namespace dark::portable
