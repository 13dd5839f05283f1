// Hashing and keyed random integers shared by the data pipeline: FNV-1a 64 (core/hash.h: train/val
// split keys, tokenizer hashes, the shard checksum) and uniform integers drawn from Philox
// streams keyed by purpose, so data order depends only on (seed, purpose, counter).
#pragma once
#include <cstdint>

#include "core/hash.h"
#include "core/philox.h"

namespace dark::data {

// Philox stream tags (the high bits of the stream word name the purpose).
inline constexpr std::uint64_t kStreamDataOrder = 0x6461746100000000ull;          // "data" + epoch
inline constexpr std::uint64_t kStreamTokenizerSample = 0x73706d0000000000ull;    // "spm"

// Uniform integer in [0, n) from Philox block (seed, stream, counter): 64 random bits
// scaled by multiplication (bias below n / 2^64, negligible for any data size).
inline std::uint64_t uniform_below(std::uint64_t seed, std::uint64_t stream, std::uint64_t counter,
                                   std::uint64_t n) {
  const philox::Block b = philox::block(seed, stream, counter);
  const std::uint64_t bits = (static_cast<std::uint64_t>(b.v[1]) << 32) | b.v[0];
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

}  // namespace dark::data
