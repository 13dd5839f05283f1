// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011):
// a counter-based generator. Output block = philox(counter, key); there is no state to
// carry, so any element of any stream can be computed independently on any device.
//
// darkformer keys streams as: key = seed (64 bit), counter = (offset: 64 bit, stream: 64 bit).
// Element i of a fill at `offset` uses block (offset + i / 4) and lane i % 4.
// Uniform floats take the top 24 bits (exact on every device). Normals use Box-Muller on
// lane pairs, computed in double with core/portable_math.h (its own log, sin and cos, every
// operation rounded on its own) and rounded to the output type, so every device gives the
// same bits: a library's log or cos, or an FMA the compiler chose, would move the last bit
// (seen on an H200: CUDA's log/cos against glibc's, 1 ulp of a double).
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "core/portable_math.h"

namespace dark::philox {

struct Block {
  std::uint32_t v[4];
};

DARK_HOST_DEVICE void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// The raw generator: 10 rounds over counter (c0..c3) with key (k0, k1).
DARK_HOST_DEVICE Block philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2,
                                     std::uint32_t c3, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return Block{{c0, c1, c2, c3}};
}

// The block for (seed, stream, counter) in darkformer's keying.
DARK_HOST_DEVICE Block block(std::uint64_t seed, std::uint64_t stream, std::uint64_t counter) {
  return philox4x32_10(static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
                       static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32),
                       static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Uniform in [0, 1) with 24 random bits (exactly representable as float).
DARK_HOST_DEVICE double uniform01(std::uint32_t bits) { return (bits >> 8) * (1.0 / 16777216.0); }

// Standard normal for lane `lane` of block b (lanes 0,1 share one Box-Muller pair, 2,3 the other):
// sqrt(-2 log u1) times cos (even lanes) or sin (odd lanes) of 2 pi u2.
DARK_HOST_DEVICE double normal(const Block& b, int lane) {
  const int pair = lane & 2;
  // (u + 1) / 2^32 lies in (0, 1] (exact: 33 bits), so the log is finite.
  const double u1 = (static_cast<double>(b.v[pair]) + 1.0) * (1.0 / 4294967296.0);
  const double radius = portable::sqrt(portable::mul(-2.0, portable::log_positive(u1)));
  const std::uint32_t angle = b.v[pair + 1];  // in turns of 2^-32
  return portable::mul(radius, (lane & 1) ? portable::sin_turns(angle) : portable::cos_turns(angle));
}

// What the fills write (before rounding to the output type), the same expression on every
// device: mean + std * normal and low + (high - low) * uniform, each operation rounded alone.
DARK_HOST_DEVICE double scaled_normal(const Block& b, int lane, double mean, double std) {
  return portable::add(mean, portable::mul(std, normal(b, lane)));
}
DARK_HOST_DEVICE double scaled_uniform(const Block& b, int lane, double low, double high) {
  return portable::add(low, portable::mul(portable::sub(high, low), uniform01(b.v[lane])));
}

}  // namespace dark::philox
