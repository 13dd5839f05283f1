// Warp-level 16 x 8 x 16 tile products on shared-memory operands, the building block of the
// attention kernels: acc (16 x 8, f32) += A (16 x 16) B (16 x 8), computed by a whole warp.
// The accumulator is held in the PTX m16n8k16 C-fragment layout whatever the element type:
// lane l (g = l / 4, t = l % 4) holds rows g and g + 8, columns 2t and 2t + 1:
//   acc[0] = (g, 2t), acc[1] = (g, 2t + 1), acc[2] = (g + 8, 2t), acc[3] = (g + 8, 2t + 1).
// bf16 operands go through the tensor cores (mma.sync, sm_80+), f32 operands through plain
// FMAs on the same layout (every lane computes its four elements), so one kernel body serves
// both. A is row-major (A[r][k] = a[r * lda + k]); B comes in two layouts:
//   k-major: B[k][n] = b[n * ldb + k] (e.g. K or Q rows for Q K^T, whose k is the head dim)
//   n-major: B[k][n] = b[k * ldb + n] (e.g. V rows for P V)
// Pointers and leading dimensions must keep pairs of bf16 4-byte aligned (even lda, ldb and
// offsets).
#pragma once
#include <cstdint>
#include <cstring>

#include "core/bfloat16.h"
#include "core/cuda/launch.cuh"

namespace dark::cuda::tile {

__device__ __forceinline__ int lane_group() { return static_cast<int>(threadIdx.x & 31) >> 2; }
__device__ __forceinline__ int lane_in_group() { return static_cast<int>(threadIdx.x & 3); }

// The row (0..15) and column (0..7) of element i of a lane's C fragment.
__device__ __forceinline__ int frag_row(int i) { return lane_group() + (i >= 2 ? 8 : 0); }
__device__ __forceinline__ int frag_col(int i) { return 2 * lane_in_group() + (i & 1); }

__device__ __forceinline__ std::uint32_t load_pair(const BFloat16* p) {
#if defined(DARK_CUDA_EMULATOR)
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
#else
  return *reinterpret_cast<const std::uint32_t*>(p);
#endif
}
__device__ __forceinline__ std::uint32_t pack(BFloat16 lo, BFloat16 hi) {
  return static_cast<std::uint32_t>(lo.bits) | (static_cast<std::uint32_t>(hi.bits) << 16);
}

// d += a b for one m16n8k16 tile in fragment registers (bf16 inputs, f32 accumulation).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::mma_m16n8k16_bf16(d, a, b, d);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // the host refuses bf16 attention on GPUs older than sm_80
#endif
}

__device__ __forceinline__ void a_fragment(std::uint32_t (&a)[4], const BFloat16* p, int lda) {
  const int g = lane_group(), t = lane_in_group();
  a[0] = load_pair(p + g * lda + 2 * t);
  a[1] = load_pair(p + (g + 8) * lda + 2 * t);
  a[2] = load_pair(p + g * lda + 2 * t + 8);
  a[3] = load_pair(p + (g + 8) * lda + 2 * t + 8);
}

// acc += A B, B k-major.
__device__ __forceinline__ void mma_kmajor(float (&acc)[4], const BFloat16* a, int lda, const BFloat16* b, int ldb) {
  std::uint32_t af[4], bf[2];
  a_fragment(af, a, lda);
  const int g = lane_group(), t = lane_in_group();
  bf[0] = load_pair(b + g * ldb + 2 * t);
  bf[1] = load_pair(b + g * ldb + 2 * t + 8);
  mma_bf16(acc, af, bf);
}

// acc += A B, B n-major.
__device__ __forceinline__ void mma_nmajor(float (&acc)[4], const BFloat16* a, int lda, const BFloat16* b, int ldb) {
  std::uint32_t af[4], bf[2];
  a_fragment(af, a, lda);
  const int g = lane_group(), t = lane_in_group();
  bf[0] = pack(b[(2 * t) * ldb + g], b[(2 * t + 1) * ldb + g]);
  bf[1] = pack(b[(2 * t + 8) * ldb + g], b[(2 * t + 9) * ldb + g]);
  mma_bf16(acc, af, bf);
}

// The same products in float32 on the CUDA cores.
__device__ __forceinline__ void mma_kmajor(float (&acc)[4], const float* a, int lda, const float* b, int ldb) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float* ar = a + frag_row(i) * lda;
    const float* bc = b + frag_col(i) * ldb;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 16; ++k) s += ar[k] * bc[k];
    acc[i] += s;
  }
}

__device__ __forceinline__ void mma_nmajor(float (&acc)[4], const float* a, int lda, const float* b, int ldb) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float* ar = a + frag_row(i) * lda;
    const int col = frag_col(i);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 16; ++k) s += ar[k] * b[k * ldb + col];
    acc[i] += s;
  }
}

// Sum / max over the four lanes of a group (one C-fragment row is spread over them).
__device__ __forceinline__ float group_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float group_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

}  // namespace dark::cuda::tile
