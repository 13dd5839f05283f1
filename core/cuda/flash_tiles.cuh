// The pieces of flash attention's bf16 kernels that do not depend on how the products are
// issued, shared by the mma.sync kernels (flash_attention_bf16.cu) and the Hopper wgmma ones
// (flash_attention_sm90*.cu): both hold scores and outputs of a warp's 16 query rows in the
// m16n8 C-fragment layout of tile_mma.cuh (lane: rows g and g + 8).
#pragma once
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cuda/async_copy.cuh"
#include "core/cuda/block_mma.cuh"
#include "core/cuda/flash_attention.cuh"
#include "core/cuda/tile_mma.cuh"

namespace dark::cuda::flash {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline constexpr float kLog2e = 1.4426950408889634f;

// The rows of a tile of `rows` starting at `start` that lie before `total`: an int whatever
// the lengths, so the loaders compare rows in 32 bits (the loading warpgroups have 24-40
// registers a thread).
__device__ __forceinline__ int rows_in_tile(std::int64_t total, std::int64_t start, int rows) {
  return total - start < rows ? static_cast<int>(total - start) : rows;
}

// kRows statistics (lse in base 2, or Delta) of consecutive rows, times factor, 0 past
// rows_left; kThreads threads load them, of which the caller is number `thread`.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_stats(int thread, float* dst, const float* src, int rows_left, float factor) {
#pragma unroll
  for (int k = 0; k < (kRows + kThreads - 1) / kThreads; ++k) {  // a fixed count: no loop where kRows <= kThreads
    const int r = thread + k * kThreads;
    if (kRows % kThreads == 0 || r < kRows) dst[r] = r < rows_left ? src[r] * factor : 0.0f;
  }
}

// The A fragment (16 rows x 16 k) made of two C fragments: columns [16 j, 16 j + 16) of a
// 16-row accumulator c[n][4], rounded to bf16 (an m16n8 C fragment is, lane for lane, half
// of an m16n8k16 A fragment, so P and dS feed the next product without shared memory).
__device__ __forceinline__ void a_from_accumulators(std::uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = tile::pack_rounded(c0[0], c0[1]);
  a[1] = tile::pack_rounded(c0[2], c0[3]);
  a[2] = tile::pack_rounded(c1[0], c1[1]);
  a[3] = tile::pack_rounded(c1[2], c1[3]);
}

// One key tile of the online softmax (base 2) for a warp's 16 query rows: sc holds the
// scores S of kCols keys and becomes P = exp2(S scale log2(e) - m); m and l (running max and
// sum of the lane's two rows) are updated, and correction receives the factor the output
// accumulator of each row is to be rescaled by (rescale()) before P V is added to it.
// visible(row, col) (row of the warp's 16, column of the tile) is asked only when !unmasked.
template <int kCols, class Visible>
__device__ __forceinline__ void online_softmax_step(float (&sc)[kCols / 8][4], float (&m)[2], float (&l)[2],
                                                    float (&correction)[2], float scale_log2, bool unmasked,
                                                    Visible&& visible) {
  float mx[2] = {kNegInf, kNegInf};
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = sc[nt][e] * scale_log2;
      if (!unmasked && !visible(tile::frag_row(e), nt * 8 + tile::frag_col(e))) x = kNegInf;
      sc[nt][e] = x;
      mx[e >> 1] = fmaxf(mx[e >> 1], x);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m[r], tile::group_max(mx[r]));
    correction[r] = m_new == kNegInf ? 1.0f : exp2f(m[r] - m_new);
    m[r] = m_new;
  }
  float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const float p = m[r] == kNegInf ? 0.0f : exp2f(sc[nt][e] - m[r]);
      row_sum[r] += p;
      sc[nt][e] = p;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * correction[r] + row_sum[r];
}

// o *= the correction of its row (online_softmax_step).
template <int kOutTiles>
__device__ __forceinline__ void rescale(float (&o)[kOutTiles][4], const float (&correction)[2]) {
#pragma unroll
  for (int nt = 0; nt < kOutTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] *= correction[e >> 1];
}

// The softmax's backward on a tile of 16 rows: from the scores s and dP = dO V^T (C-fragment
// layout), P = exp2(s scale log2(e) - lse) and dS = P (dP - Delta) scale, both 0 where
// visible(row, col) is false (asked only when !unmasked); s becomes P, dp becomes dS. lse
// (base 2) and Delta are indexed by query: the row (stat_row0 + row) where queries are the
// rows (dQ), the column where they are the columns (dK, dV: the transposed scores).
template <int kCols, bool kQueriesAreColumns, class Visible>
__device__ __forceinline__ void softmax_backward_step(float (&s)[kCols / 8][4], float (&dp)[kCols / 8][4],
                                                      const float* lse, const float* delta, int stat_row0,
                                                      float scale_log2, float scale, bool unmasked,
                                                      Visible&& visible) {
  auto step = [&](auto masked) {
#pragma unroll
    for (int nt = 0; nt < kCols / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = tile::frag_row(e), col = nt * 8 + tile::frag_col(e);
        const int stat = kQueriesAreColumns ? col : stat_row0 + row;
        float p = 0.0f, ds = 0.0f;
        if (!masked || visible(row, col)) {
          p = exp2f(s[nt][e] * scale_log2 - lse[stat]);
          ds = p * (dp[nt][e] - delta[stat]) * scale;
        }
        s[nt][e] = p;
        dp[nt][e] = ds;
      }
  };
  // Two copies of the loop: the unmasked one asks nothing per element.
  if (unmasked)
    step(std::false_type{});
  else
    step(std::true_type{});
}

// Writes the warp's 16 rows of output (o / l, bf16, (B, T, Hq, D)) and their log-sum-exp
// (natural log, (B, Hq, T)), query tq0 being the warp's first row; rows past T are skipped.
template <int kOutTiles>
__device__ __forceinline__ void store_rows(const float (&o)[kOutTiles][4], const float (&m)[2], float (&l)[2],
                                           const AttnShape& g, std::int64_t b, std::int64_t h, std::int64_t tq0,
                                           BFloat16* out, float* lse) {
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = tile::group_sum(l[r]);
#pragma unroll
  for (int nt = 0; nt < kOutTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const std::int64_t tq = tq0 + tile::frag_row(e), col = nt * 8 + tile::frag_col(e);
      if (tq < g.t && col < g.d)
        out[((b * g.t + tq) * g.hq + h) * g.d + col] = BFloat16(m[r] == kNegInf ? 0.0f : o[nt][e] / l[r]);
    }
  if (tile::lane_in_group() == 0)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const std::int64_t tq = tq0 + tile::lane_group() + 8 * r;
      if (tq < g.t) lse[(b * g.hq + h) * g.t + tq] = m[r] == kNegInf ? kNegInf : m[r] / kLog2e + logf(l[r]);
    }
}

}  // namespace dark::cuda::flash
