// Hopper's warpgroup products on the CPU (see wgmma.h).
#include "cuda_emulator/wgmma.h"

#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "cuda_emulator/grid.h"

namespace dark::cuda_emu {
namespace {

// The fields of a shared-memory matrix descriptor (PTX: "Matrix Descriptor Format").
struct Descriptor {
  std::uint32_t start, lbo, sbo;

  explicit Descriptor(std::uint64_t bits) {
    start = static_cast<std::uint32_t>(bits & 0x3fff) << 4;
    lbo = static_cast<std::uint32_t>((bits >> 16) & 0x3fff) << 4;
    sbo = static_cast<std::uint32_t>((bits >> 32) & 0x3fff) << 4;
    const auto base_offset = static_cast<unsigned>((bits >> 49) & 7), swizzle = static_cast<unsigned>(bits >> 62);
    if (swizzle != 1)
      device_fault(str("a wgmma descriptor with swizzle mode ", swizzle,
                       ": the emulator implements the 128-byte swizzle (mode 1) only"));
    if (base_offset != 0)
      device_fault(str("a wgmma descriptor with base offset ", base_offset,
                       ": the emulator needs swizzle patterns that start on 1024-byte boundaries"));
  }

  // The bf16 at (mn, k) of an operand stored K-major or MN-major, as a float.
  float at(int mn, int k, bool mn_major) const {
    const std::uint32_t linear =
        mn_major ? start + 2u * (mn % 64) + (mn / 64) * lbo + (k % 8) * 128u + (k / 8) * sbo
                 : start + (mn % 8) * 128u + (mn / 8) * sbo + 2u * k;
    const std::uint32_t physical = linear ^ (((linear >> 7) & 7u) << 4);  // the 128-byte swizzle
    std::uint16_t half;
    std::memcpy(&half, shared_bytes(physical, 2), 2);
    return bf16_to_float(half);
  }

  static float bf16_to_float(std::uint16_t half) {
    const std::uint32_t bits = static_cast<std::uint32_t>(half) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

std::atomic<std::uint64_t> issued{0};
std::atomic<float> corruption{0.0f};

}  // namespace

std::uint64_t wgmma_issued() { return issued; }
void corrupt_wgmma_products(float offset) { corruption = offset; }

void wgmma_bf16(float* d, int n, std::uint64_t a_desc, const std::uint32_t* a_regs, std::uint64_t b_desc,
                bool b_mn_major, bool accumulate) {
  const ThreadContext& c = current();
  if (c.block_dim.x * c.block_dim.y * c.block_dim.z % 128 != 0)
    device_fault("wgmma needs whole warpgroups (a block of a multiple of 128 threads)");
  if (n < 8 || n > 256 || n % 8 != 0) device_fault(str("wgmma with N = ", n, " (valid: 8, 16, ..., 256)"));
  ++issued;
  const int lane = c.lane, row_base = 16 * (c.warp % 4);  // the warp's rows of the 64
  const int g = lane / 4, t = lane % 4;
  // Where every lane of the warp keeps its A registers: read when the product runs, as the
  // tensor cores may (a kernel that overwrites them before the wait computes with the new
  // values here, in at least the lane that waits first).
  std::array<const std::uint32_t*, 32> lanes_a{};
  warp_all_gather(&a_regs, lanes_a.data(), sizeof a_regs);  // also makes the product warp-synchronous
  async_issue([=, offset = corruption.load()] {
    const Descriptor b(b_desc);
    std::vector<float> a(32);
    if (a_regs) {
      for (int half = 0; half < 2; ++half)
        for (int k = 0; k < 16; ++k) {  // PTX: the m16n8k16 A fragment of this lane's rows g and g + 8
          const int row = g + 8 * half;
          const int from = (row & 7) * 4 + ((k & 7) >> 1), e = (k >= 8 ? 4 : 0) + (row >= 8 ? 2 : 0) + (k & 1);
          const std::uint32_t word = lanes_a[from][e >> 1];
          a[16 * half + k] = Descriptor::bf16_to_float(static_cast<std::uint16_t>((e & 1) ? word >> 16 : word));
        }
    } else {
      const Descriptor ad(a_desc);
      for (int half = 0; half < 2; ++half)
        for (int k = 0; k < 16; ++k) a[16 * half + k] = ad.at(row_base + g + 8 * half, k, false);
    }
    for (int i = 0; i < n / 2; ++i) {
      const int half = (i % 4) / 2, col = 8 * (i / 4) + 2 * t + (i & 1);
      float sum = 0.0f;
      for (int k = 0; k < 16; ++k) sum += a[16 * half + k] * b.at(col, k, b_mn_major);
      d[i] = accumulate ? d[i] + sum : sum;
      if (offset != 0.0f) d[i] += offset;
    }
  });
}

void wgmma_wait(int pending_groups) {
  sync_warp(0xffffffffu);
  async_wait(pending_groups);
  sync_warp(0xffffffffu);
}

}  // namespace dark::cuda_emu
