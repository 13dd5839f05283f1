// FNV-1a 64: the one non-cryptographic hash of the code base (train/val split keys, tokenizer
// and shard checksums, parameter-name streams, data-folder names). Stable across platforms
// and versions: its values are stored in files and select random streams, so never change it.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dark {

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;
// The start value of parameter-name streams (nn/init.h) and custom-source data folders: the
// decimal offset basis with its last digit lost (1469598103934665603, not ...6037). Kept as
// it is, because every initialisation and every prepared data folder name depends on it.
inline constexpr std::uint64_t kNameHashStart = 1469598103934665603ull;

// FNV-1a 64 over bytes; `hash` continues an earlier call.
inline std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t hash = kFnvOffset) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= kFnvPrime;
  }
  return hash;
}

// 16 lower-case hex digits.
inline std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace dark
