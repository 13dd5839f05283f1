// Warp-level 16 x 8 x 16 tile products, the building block of the attention kernels:
// acc (16 x 8, f32) += A (16 x 16) B (16 x 8), computed by a whole warp. The accumulator is
// held in the PTX m16n8k16 C-fragment layout whatever the element type: lane l (g = l / 4,
// t = l % 4) holds rows g and g + 8, columns 2t and 2t + 1:
//   acc[0] = (g, 2t), acc[1] = (g, 2t + 1), acc[2] = (g + 8, 2t), acc[3] = (g + 8, 2t + 1).
// bf16: operands in fragment registers (loaded with ldmatrix, or built from accumulators)
// multiplied on the tensor cores (mma_bf16: mma.sync, sm_80+). f32: mma_kmajor / mma_nmajor
// compute the same layout with FMAs on shared-memory operands (every lane its four elements).
// A is row-major (A[r][k] = a[r * lda + k]); B comes in two layouts:
//   k-major: B[k][n] = b[n * ldb + k] (e.g. K or Q rows for Q K^T, whose k is the head dim)
//   n-major: B[k][n] = b[k * ldb + n] (e.g. V rows for P V)
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

// ldmatrix.x4: lanes 8i .. 8i + 7 pass the address of row (lane % 8) of 8 x 8 bf16 matrix i
// (16-byte aligned rows in shared memory); r[i] receives matrix i's elements at row lane / 4,
// columns 2 (lane % 4) and the next (the transposed form: column lane / 4, rows 2 (lane % 4)
// and the next). One instruction loads an A fragment, or the B fragments of two 8-column tiles.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const BFloat16* row) {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::ldmatrix_x4(r, row, false);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
#else
  __trap();
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const BFloat16* row) {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::ldmatrix_x4(r, row, true);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
#else
  __trap();
#endif
}

// acc += A B in float32 on the CUDA cores, in the same fragment layout (the f32 attention
// kernels), for B k-major and n-major.
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
