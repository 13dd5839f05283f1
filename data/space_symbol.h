// Text as SentencePiece-style vocabularies store it: a space is U+2581 "▁", and text is cut
// into characters by the UTF-8 lead byte alone, so that invalid UTF-8 never fails.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dark::data {

inline constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581

// Bytes in the character that starts with lead byte b, by its high nibble alone (invalid
// UTF-8 included): 0x0..0xB -> 1, 0xC..0xD -> 2, 0xE -> 3, 0xF -> 4.
inline std::size_t char_bytes(unsigned char b) {
  static constexpr std::array<std::uint8_t, 16> by_nibble = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return by_nibble[b >> 4];
}

}  // namespace dark::data
