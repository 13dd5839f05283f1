// bfloat16 storage type: the top 16 bits of an IEEE float32. Same bit layout as CUDA's
// __nv_bfloat16, so device buffers can be reinterpreted. Conversion from float rounds to
// nearest even and keeps NaN a NaN.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace dark {

struct BFloat16 {
  std::uint16_t bits = 0;

  BFloat16() = default;
  DARK_HOST_DEVICE explicit BFloat16(float f) : bits(from_float(f)) {}
  DARK_HOST_DEVICE operator float() const { return to_float(bits); }

  DARK_HOST_DEVICE static std::uint16_t from_float(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>((u + rounding) >> 16);
  }
  DARK_HOST_DEVICE static float to_float(std::uint16_t b) {
    std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
static_assert(sizeof(BFloat16) == 2);

}  // namespace dark
