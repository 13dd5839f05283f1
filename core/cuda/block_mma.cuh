// Block-level matrix products for kernels whose operands are computed in place (the
// linear-attention chunk kernels): out (M x N, f32, leading dimension ldo) = or += A (M x K)
// B (K x N), where A(i, k) = a.p[i * a.row + k * a.col] (so any transposition, in shared or
// global memory, of any element type). The block's warps take 16 x 32 output tiles in turn;
// each walks K in steps of 16 in the m16n8k16 fragment layout of tile_mma.cuh, one A
// fragment serving four 8-column B fragments. The operand precision E chooses the engine:
//   BFloat16:  operands are rounded to bf16 as they are loaded (exact for bf16 inputs) and
//              multiplied on the tensor cores (mma.sync) with f32 accumulation;
//   SplitBF16: each operand is carried as hi + lo, two bf16 (about 16 significant bits), and
//              a b as hi hi + hi lo + lo hi: three tensor-core products, for sums whose terms
//              cancel (where bf16's 8 bits would leave too few in the difference);
//   float:     f32 FMAs on the CUDA cores in the same layout, k in order.
// Entries past M, N or K read as zeros, so sizes need not be multiples of the tiles. Each
// output is summed by one lane in a fixed order: the same inputs give the same bits. No
// barrier inside: the caller synchronises before reading `out` or overwriting an operand.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/cuda/tile_mma.cuh"

namespace dark::cuda::tile {

template <class E>
struct StridedMat {
  const E* p;
  int row, col;
  __device__ __forceinline__ float at(int i, int k) const { return static_cast<float>(p[i * row + k * col]); }
};

template <class E>
__device__ __forceinline__ StridedMat<E> strided(const E* p, int row, int col) {
  return {p, row, col};
}

// Two floats rounded to nearest-even bf16 and packed (lo in the low half), as the mma.sync
// operand registers want them: one cvt instruction on sm_80+, the portable rounding elsewhere.
__device__ __forceinline__ std::uint32_t pack_rounded(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(DARK_CUDA_EMULATOR)
  std::uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
#else
  return pack(BFloat16(lo), BFloat16(hi));
#endif
}

// Operand precision tag: the two-bf16 split described above.
struct SplitBF16 {};

// The pair (lo, hi) rounded to bf16 (`big`) and the bf16 rounding of what that leaves (`small`).
__device__ __forceinline__ void pack_split(float lo, float hi, std::uint32_t& big, std::uint32_t& small) {
  big = pack_rounded(lo, hi);
  small = pack_rounded(lo - __uint_as_float(big << 16), hi - __uint_as_float(big & 0xffff0000u));
}

constexpr int kWarpTileCols = 32;  // four 8-column mma tiles per warp tile

// Calls epilogue(i, j, value) once for every output (i < M, j < N), from the lane that summed it.
template <class E, class EA, class EB, class Epilogue>
__device__ void block_mma_each(int M, int N, int K, StridedMat<EA> a, StridedMat<EB> b, Epilogue&& epilogue) {
  static_assert(std::is_same_v<E, float> || std::is_same_v<E, BFloat16> || std::is_same_v<E, SplitBF16>,
                "operands are f32, bf16 or split bf16");
  const int warp = static_cast<int>(threadIdx.x) >> 5, warps = static_cast<int>(blockDim.x) >> 5;
  const int g = lane_group(), t = lane_in_group();
  const int tiles_n = (N + kWarpTileCols - 1) / kWarpTileCols, tiles = (M + 15) / 16 * tiles_n;
  auto a_at = [&](int i, int k) { return (i < M && k < K) ? a.at(i, k) : 0.0f; };
  auto b_at = [&](int k, int j) { return (k < K && j < N) ? b.at(k, j) : 0.0f; };
  for (int tile_index = warp; tile_index < tiles; tile_index += warps) {
    const int i0 = tile_index / tiles_n * 16, j0 = tile_index % tiles_n * kWarpTileCols;
    const int n_tiles = (N - j0 + 7) / 8;  // warp-uniform: mma.sync needs every lane
    const int r0 = i0 + g, r1 = r0 + 8;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
      if constexpr (std::is_same_v<E, BFloat16>) {
        const int ka = k0 + 2 * t, kb = ka + 8;
        const std::uint32_t af[4] = {pack_rounded(a_at(r0, ka), a_at(r0, ka + 1)),
                                     pack_rounded(a_at(r1, ka), a_at(r1, ka + 1)),
                                     pack_rounded(a_at(r0, kb), a_at(r0, kb + 1)),
                                     pack_rounded(a_at(r1, kb), a_at(r1, kb + 1))};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          if (nt < n_tiles) {
            const int col = j0 + nt * 8 + g;
            const std::uint32_t bf[2] = {pack_rounded(b_at(ka, col), b_at(ka + 1, col)),
                                         pack_rounded(b_at(kb, col), b_at(kb + 1, col))};
            mma_bf16(acc[nt], af, bf);
          }
      } else if constexpr (std::is_same_v<E, SplitBF16>) {
        const int ka = k0 + 2 * t, kb = ka + 8;
        std::uint32_t a_big[4], a_small[4];
        pack_split(a_at(r0, ka), a_at(r0, ka + 1), a_big[0], a_small[0]);
        pack_split(a_at(r1, ka), a_at(r1, ka + 1), a_big[1], a_small[1]);
        pack_split(a_at(r0, kb), a_at(r0, kb + 1), a_big[2], a_small[2]);
        pack_split(a_at(r1, kb), a_at(r1, kb + 1), a_big[3], a_small[3]);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          if (nt < n_tiles) {
            const int col = j0 + nt * 8 + g;
            std::uint32_t b_big[2], b_small[2];
            pack_split(b_at(ka, col), b_at(ka + 1, col), b_big[0], b_small[0]);
            pack_split(b_at(kb, col), b_at(kb + 1, col), b_big[1], b_small[1]);
            mma_bf16(acc[nt], a_small, b_big);  // the small terms first, while acc is small
            mma_bf16(acc[nt], a_big, b_small);
            mma_bf16(acc[nt], a_big, b_big);
          }
      } else {
        const int k_end = K - k0 < 16 ? K - k0 : 16;
        for (int kk = 0; kk < k_end; ++kk) {
          const float a0 = a_at(r0, k0 + kk), a1 = a_at(r1, k0 + kk);
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
            if (nt < n_tiles) {
              const int col = j0 + nt * 8 + 2 * t;
              const float b0 = b_at(k0 + kk, col), b1 = b_at(k0 + kk, col + 1);
              acc[nt][0] += a0 * b0, acc[nt][1] += a0 * b1, acc[nt][2] += a1 * b0, acc[nt][3] += a1 * b1;
            }
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
      if (nt < n_tiles)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = i0 + frag_row(i), col = j0 + nt * 8 + frag_col(i);
          if (row < M && col < N) epilogue(row, col, acc[nt][i]);
        }
  }
}

// out[i * ldo + j] = (kAdd: +=) (A B)(i, j).
template <class E, bool kAdd, class EA, class EB>
__device__ void block_mma(float* out, int ldo, int M, int N, int K, StridedMat<EA> a, StridedMat<EB> b) {
  block_mma_each<E>(M, N, K, a, b, [&](int i, int j, float value) {
    float& o = out[i * ldo + j];
    o = kAdd ? o + value : value;
  });
}

}  // namespace dark::cuda::tile
