// Little-endian loads of unaligned integers from GGUF bytes, shared by the file parser
// (gguf.cpp) and the dequantisation kernels (gguf_dequantize.cpp). Internal to the GGUF
// reader: both read raw bytes of the memory-mapped file, and inline functions keep these
// one-line loads free in the kernels' inner loops.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace dark::data::detail {

inline std::uint16_t load_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace dark::data::detail
