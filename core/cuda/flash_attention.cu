// Flash attention on CUDA for f32 and bf16, forward and backward, with grouped-query heads,
// causal masking (query t sees keys s <= t + S - T), an optional sliding window (query t
// also loses the keys s <= t + S - T - window; key tiles wholly outside every row's window
// are skipped, so the work is O(T window)), a key padding mask and the CPU kernel's
// contract (core/kernels.h): only out and the row logsumexp are saved; a row that sees no
// real key gets out = 0, lse = -inf and zero gradients; padded keys get dk = dv = 0.
//
// This file holds the f32 kernels and the host side; bf16 runs the tensor-core kernels of
// flash_attention_bf16.cu (FlashAttention-2's design: cp.async, ldmatrix, probabilities kept
// in registers), which share this contract and the shape (flash_attention.cuh). f32 layout: every block works on one (batch, head) and tiles of rows;
// warps own 16 rows each. Scores, probabilities and gradients are products of shared-memory
// tiles in the mma fragment layout computed with FMAs (tile_mma.cuh). Softmax statistics,
// accumulators and lse are f32. The head dimension D is padded with zeros to kD in
// {32, 64, 128, 256}.
//   forward: a block per 64 (kBr) queries; it walks the key tiles the queries can see with
//            an online softmax (running max m and sum l per row).
//   backward (FlashAttention-2, made deterministic): Delta = rowsum(dO * O) first; then one
//            kernel per key tile accumulates dK, dV over the group's query heads and their
//            query tiles in a fixed order, and a second kernel per query tile accumulates dQ
//            over the key tiles. No atomics: the same inputs give the same bits every run.
//            lse's gradient, when the op returns lse, enters as Delta = rowsum(dO * O) - dlse.
// Loops: those over fragments (nt, i) are unrolled, so the accumulators stay in registers; the
// loops over the reduction dimension in steps of 16 (kk) stay rolled: they only move the
// shared-memory pointers, and each step already holds 4-32 fragment products of 64 FMAs (one
// loop branch per 256 FMAs or more). Unrolled, they made this file the build's slowest (about
// 4 minutes of cicc and ptxas on 2 cores, for 12 kernels).
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cuda/flash_attention.cuh"
#include "core/cuda/flash_attention_sm90_guard.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/tile_mma.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

using flash::AttnShape;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows [0, kRows) of one head's (L, D) matrix from `src` (row r at src + r * row_stride),
// as a zero-padded kRows x kD tile with leading dimension ld; rows >= rows_left and columns
// >= d are zero. Cooperative over the block's `threads` threads.
template <class T, int kD, int kRows>
__device__ void load_tile(T* dst, int ld, const T* src, std::int64_t row_stride, std::int64_t rows_left, std::int64_t d,
                          int threads) {
  for (int idx = threadIdx.x; idx < kRows * kD; idx += threads) {
    const int r = idx / kD, c = idx % kD;
    dst[r * ld + c] = (r < rows_left && c < d) ? src[r * row_stride + c] : T(0.0f);
  }
}

// Float row statistics (lse, Delta) of rows [t0, t0 + rows) of one (b, h), zero past the end.
template <int kRows>
__device__ void load_stats(float* dst, const float* src, std::int64_t rows_left, int threads) {
  for (int r = threadIdx.x; r < kRows; r += threads) dst[r] = r < rows_left ? src[r] : 0.0f;
}

template <class T, int kD>
struct FwdTiles {
  static constexpr int kBr = 64, kWarps = 4, kThreads = 128;
  static constexpr int kBc = kD <= 128 ? 64 : 32;
  static constexpr int kLd = kD + 8, kLdP = kBc + 8;
  static constexpr std::size_t kSmem =
      (static_cast<std::size_t>(kBr + 2 * kBc) * kLd + static_cast<std::size_t>(kWarps) * 16 * kLdP) * sizeof(T);
};

template <class T, int kD>
struct BwdTiles {
  static constexpr bool kBig = sizeof(T) * kD > 512;  // f32 at D = 256: smaller tiles to fit shared memory
  static constexpr int kBq = kBig ? 32 : 64;           // queries per tile
  static constexpr int kBk = kBig ? 32 : 64;           // keys per tile
  static constexpr int kLd = kD + 8;
  static constexpr int kDo = kD > 128 ? 128 : kD;      // dK, dV columns per block (registers)
  static constexpr int kPasses = kD / kDo;
  static constexpr int kQWarps = kBq / 16, kKWarps = kBk / 16;
  static constexpr int kLdQ = kBq + 8, kLdK = kBk + 8;
  static constexpr std::size_t kSmemDq =
      (static_cast<std::size_t>(2 * kBq + 2 * kBk) * kLd + static_cast<std::size_t>(kQWarps) * 16 * kLdK) * sizeof(T) +
      2 * kBq * sizeof(float);
  static constexpr std::size_t kSmemDkv =
      (static_cast<std::size_t>(2 * kBq + 2 * kBk) * kLd + static_cast<std::size_t>(kKWarps) * 16 * kLdQ) * sizeof(T) +
      2 * kBq * sizeof(float);
};

// grid (ceil(T / kBr), Hq, B), block kThreads.
template <class T, int kD>
__global__ void __launch_bounds__(128) flash_forward_kernel(const T* q, const T* k, const T* v, AttnShape g, T* out,
                                                            float* lse) {
  using C = FwdTiles<T, kD>;
  DARK_DYNAMIC_SHARED(T, smem);
  T* sq = smem;
  T* sk = sq + C::kBr * C::kLd;
  T* sv = sk + C::kBc * C::kLd;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  T* sp = sv + C::kBc * C::kLd + warp * 16 * C::kLdP;
  const std::int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * C::kBr;
  const T* qh = q + b * g.q_stride[0] + h * g.q_stride[2];
  const T* kh = k + b * g.k_stride[0] + kvh * g.k_stride[2];
  const T* vh = v + b * g.v_stride[0] + kvh * g.v_stride[2];
  load_tile<T, kD, C::kBr>(sq, C::kLd, qh + t0 * g.q_stride[1], g.q_stride[1], g.t - t0, g.d, C::kThreads);

  float o[kD / 8][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  const std::int64_t s_end = g.key_end(t0, C::kBr);
  for (std::int64_t s0 = g.first_key_tile(t0, C::kBc); s0 < s_end; s0 += C::kBc) {
    __syncthreads();  // the previous tile's readers are done (and the Q tile is loaded)
    load_tile<T, kD, C::kBc>(sk, C::kLd, kh + s0 * g.k_stride[1], g.k_stride[1], g.s - s0, g.d, C::kThreads);
    load_tile<T, kD, C::kBc>(sv, C::kLd, vh + s0 * g.v_stride[1], g.v_stride[1], g.s - s0, g.d, C::kThreads);
    __syncthreads();
    float sc[C::kBc / 8][4] = {};
#pragma unroll 1  // rolled: see "Loops" above
    for (int kk = 0; kk < kD; kk += 16)
#pragma unroll
      for (int nt = 0; nt < C::kBc / 8; ++nt)
        tile::mma_kmajor(sc[nt], sq + warp * 16 * C::kLd + kk, C::kLd, sk + nt * 8 * C::kLd + kk, C::kLd);
    float mx[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int nt = 0; nt < C::kBc / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const std::int64_t tq = t0 + warp * 16 + tile::frag_row(i), key = s0 + nt * 8 + tile::frag_col(i);
        sc[nt][i] = g.visible(b, tq, key) ? sc[nt][i] * g.scale : kNegInf;
        mx[i >> 1] = fmaxf(mx[i >> 1], sc[nt][i]);
      }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], tile::group_max(mx[r]));
      correction[r] = m_new == kNegInf ? 1.0f : expf(m[r] - m_new);
      m[r] = m_new;
    }
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < C::kBc / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1;
        const float p = m[r] == kNegInf ? 0.0f : expf(sc[nt][i] - m[r]);
        row_sum[r] += p;
        sp[tile::frag_row(i) * C::kLdP + nt * 8 + tile::frag_col(i)] = T(p);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * correction[r] + row_sum[r];
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[nt][i] *= correction[i >> 1];
    __syncwarp();
#pragma unroll 1  // rolled: see "Loops" above
    for (int kk = 0; kk < C::kBc; kk += 16)
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) tile::mma_nmajor(o[nt], sp + kk, C::kLdP, sv + kk * C::kLd + nt * 8, C::kLd);
    __syncwarp();  // the next tile overwrites sp
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = tile::group_sum(l[r]);
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i >> 1;
      const std::int64_t tq = t0 + warp * 16 + tile::frag_row(i), col = nt * 8 + tile::frag_col(i);
      if (tq < g.t && col < g.d)
        out[((b * g.t + tq) * g.hq + h) * g.d + col] = T(m[r] == kNegInf ? 0.0f : o[nt][i] / l[r]);
    }
  if (tile::lane_in_group() == 0)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const std::int64_t tq = t0 + warp * 16 + tile::lane_group() + 8 * r;
      if (tq < g.t) lse[(b * g.hq + h) * g.t + tq] = m[r] == kNegInf ? kNegInf : m[r] + logf(l[r]);
    }
}

// Delta[b, h, t] = sum_j dout[b, t, h, j] out[b, t, h, j] - dlse[b, h, t] (dlse: nullptr when
// lse is not an output; d lse / d s = P, so its gradient enters every kernel's dS = P (dP - Delta)
// through Delta alone); one warp per row.
template <class T>
__global__ void flash_delta_kernel(const T* out, const T* dout, const float* dlse, float* delta, std::int64_t rows,
                                   std::int64_t t_len, std::int64_t heads, std::int64_t d) {
  const int lane = threadIdx.x & 31;
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < rows;
       row += static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32)) {
    float acc = 0.0f;
    for (std::int64_t j = lane; j < d; j += 32) acc += static_cast<float>(out[row * d + j]) * static_cast<float>(dout[row * d + j]);
#pragma unroll
    for (int delta_lane = 16; delta_lane > 0; delta_lane >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, delta_lane);
    if (lane == 0) {
      const std::int64_t h = row % heads, t = (row / heads) % t_len, b = row / (heads * t_len);
      const std::int64_t at = (b * heads + h) * t_len + t;
      delta[at] = dlse ? acc - dlse[at] : acc;
    }
  }
}

// dQ: grid (ceil(T / kBq), Hq, B), block kQWarps warps.
template <class T, int kD>
__global__ void __launch_bounds__(128) flash_dq_kernel(const T* q, const T* k, const T* v, const T* dout,
                                                       const float* lse, const float* delta, AttnShape g, T* dq) {
  using C = BwdTiles<T, kD>;
  constexpr int kThreadsN = C::kQWarps * 32;
  DARK_DYNAMIC_SHARED(T, smem);
  T* sq = smem;
  T* sdo = sq + C::kBq * C::kLd;
  T* sk = sdo + C::kBq * C::kLd;
  T* sv = sk + C::kBk * C::kLd;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  T* sds = sv + C::kBk * C::kLd + warp * 16 * C::kLdK;
  float* s_lse = reinterpret_cast<float*>(sv + C::kBk * C::kLd + C::kQWarps * 16 * C::kLdK);
  float* s_delta = s_lse + C::kBq;
  const std::int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * C::kBq;
  const T* kh = k + b * g.k_stride[0] + kvh * g.k_stride[2];
  const T* vh = v + b * g.v_stride[0] + kvh * g.v_stride[2];
  load_tile<T, kD, C::kBq>(sq, C::kLd, q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1], g.q_stride[1],
                           g.t - t0, g.d, kThreadsN);
  load_tile<T, kD, C::kBq>(sdo, C::kLd, dout + ((b * g.t + t0) * g.hq + h) * g.d, g.hq * g.d, g.t - t0, g.d, kThreadsN);
  load_stats<C::kBq>(s_lse, lse + (b * g.hq + h) * g.t + t0, g.t - t0, kThreadsN);
  load_stats<C::kBq>(s_delta, delta + (b * g.hq + h) * g.t + t0, g.t - t0, kThreadsN);

  float acc[kD / 8][4] = {};
  const std::int64_t s_end = g.key_end(t0, C::kBq);
  for (std::int64_t s0 = g.first_key_tile(t0, C::kBk); s0 < s_end; s0 += C::kBk) {
    __syncthreads();
    load_tile<T, kD, C::kBk>(sk, C::kLd, kh + s0 * g.k_stride[1], g.k_stride[1], g.s - s0, g.d, kThreadsN);
    load_tile<T, kD, C::kBk>(sv, C::kLd, vh + s0 * g.v_stride[1], g.v_stride[1], g.s - s0, g.d, kThreadsN);
    __syncthreads();
    float sc[C::kBk / 8][4] = {}, dp[C::kBk / 8][4] = {};
#pragma unroll 1  // rolled: see "Loops" above
    for (int kk = 0; kk < kD; kk += 16)
#pragma unroll
      for (int nt = 0; nt < C::kBk / 8; ++nt) {
        tile::mma_kmajor(sc[nt], sq + warp * 16 * C::kLd + kk, C::kLd, sk + nt * 8 * C::kLd + kk, C::kLd);
        tile::mma_kmajor(dp[nt], sdo + warp * 16 * C::kLd + kk, C::kLd, sv + nt * 8 * C::kLd + kk, C::kLd);
      }
#pragma unroll
    for (int nt = 0; nt < C::kBk / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = warp * 16 + tile::frag_row(i), col = nt * 8 + tile::frag_col(i);
        float ds = 0.0f;
        if (g.visible(b, t0 + row, s0 + col)) {
          const float p = expf(sc[nt][i] * g.scale - s_lse[row]);
          ds = p * (dp[nt][i] - s_delta[row]) * g.scale;
        }
        sds[tile::frag_row(i) * C::kLdK + col] = T(ds);
      }
    __syncwarp();
#pragma unroll 1  // rolled: see "Loops" above
    for (int kk = 0; kk < C::kBk; kk += 16)
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) tile::mma_nmajor(acc[nt], sds + kk, C::kLdK, sk + kk * C::kLd + nt * 8, C::kLd);
    __syncwarp();
  }
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t tq = t0 + warp * 16 + tile::frag_row(i), col = nt * 8 + tile::frag_col(i);
      if (tq < g.t && col < g.d) dq[((b * g.t + tq) * g.hq + h) * g.d + col] = T(acc[nt][i]);
    }
}

// dK, dV: grid (ceil(S / kBk) * kPasses, Hkv, B), block kKWarps warps; pass p writes columns
// [p kDo, (p + 1) kDo).
template <class T, int kD>
__global__ void __launch_bounds__(128) flash_dkv_kernel(const T* q, const T* k, const T* v, const T* dout,
                                                        const float* lse, const float* delta, AttnShape g, T* dk,
                                                        T* dv) {
  using C = BwdTiles<T, kD>;
  constexpr int kThreadsN = C::kKWarps * 32;
  DARK_DYNAMIC_SHARED(T, smem);
  T* sk = smem;
  T* sv = sk + C::kBk * C::kLd;
  T* sq = sv + C::kBk * C::kLd;
  T* sdo = sq + C::kBq * C::kLd;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  T* sp = sdo + C::kBq * C::kLd + warp * 16 * C::kLdQ;
  float* s_lse = reinterpret_cast<float*>(sdo + C::kBq * C::kLd + C::kKWarps * 16 * C::kLdQ);
  float* s_delta = s_lse + C::kBq;
  const std::int64_t kvh = blockIdx.y, b = blockIdx.z;
  const int pass = static_cast<int>(blockIdx.x % C::kPasses), c0 = pass * C::kDo;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x / C::kPasses) * C::kBk;
  load_tile<T, kD, C::kBk>(sk, C::kLd, k + b * g.k_stride[0] + kvh * g.k_stride[2] + s0 * g.k_stride[1], g.k_stride[1],
                           g.s - s0, g.d, kThreadsN);
  load_tile<T, kD, C::kBk>(sv, C::kLd, v + b * g.v_stride[0] + kvh * g.v_stride[2] + s0 * g.v_stride[1], g.v_stride[1],
                           g.s - s0, g.d, kThreadsN);
  float acc_k[C::kDo / 8][4] = {}, acc_v[C::kDo / 8][4] = {};
  // The first query that sees key s0 (the earliest key of the tile), and one past the last
  // query that sees the tile's last key.
  const std::int64_t q_first = g.causal ? std::max<std::int64_t>(0, s0 - (g.s - g.t)) : 0;
  const std::int64_t q_end = g.query_end(std::min(g.s, s0 + C::kBk) - 1);
  for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
    for (std::int64_t t0 = q_first / C::kBq * C::kBq; t0 < q_end; t0 += C::kBq) {
      __syncthreads();
      load_tile<T, kD, C::kBq>(sq, C::kLd, q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1],
                               g.q_stride[1], g.t - t0, g.d, kThreadsN);
      load_tile<T, kD, C::kBq>(sdo, C::kLd, dout + ((b * g.t + t0) * g.hq + h) * g.d, g.hq * g.d, g.t - t0, g.d,
                               kThreadsN);
      load_stats<C::kBq>(s_lse, lse + (b * g.hq + h) * g.t + t0, g.t - t0, kThreadsN);
      load_stats<C::kBq>(s_delta, delta + (b * g.hq + h) * g.t + t0, g.t - t0, kThreadsN);
      __syncthreads();
      // Rows are this warp's 16 keys, columns the tile's queries.
      float pt[C::kBq / 8][4] = {}, dpt[C::kBq / 8][4] = {};
#pragma unroll 1  // rolled: see "Loops" above
      for (int kk = 0; kk < kD; kk += 16)
#pragma unroll
        for (int nt = 0; nt < C::kBq / 8; ++nt) {
          tile::mma_kmajor(pt[nt], sk + warp * 16 * C::kLd + kk, C::kLd, sq + nt * 8 * C::kLd + kk, C::kLd);
          tile::mma_kmajor(dpt[nt], sv + warp * 16 * C::kLd + kk, C::kLd, sdo + nt * 8 * C::kLd + kk, C::kLd);
        }
#pragma unroll
      for (int nt = 0; nt < C::kBq / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = warp * 16 + tile::frag_row(i), col = nt * 8 + tile::frag_col(i);
          pt[nt][i] = g.visible(b, t0 + col, s0 + key) ? expf(pt[nt][i] * g.scale - s_lse[col]) : 0.0f;
          sp[tile::frag_row(i) * C::kLdQ + col] = T(pt[nt][i]);
        }
      __syncwarp();
#pragma unroll 1  // rolled: see "Loops" above
      for (int kk = 0; kk < C::kBq; kk += 16)
#pragma unroll
        for (int nt = 0; nt < C::kDo / 8; ++nt)
          tile::mma_nmajor(acc_v[nt], sp + kk, C::kLdQ, sdo + kk * C::kLd + c0 + nt * 8, C::kLd);
      __syncwarp();  // every lane has read P before it becomes dS
#pragma unroll
      for (int nt = 0; nt < C::kBq / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int col = nt * 8 + tile::frag_col(i);
          sp[tile::frag_row(i) * C::kLdQ + col] = T(pt[nt][i] * (dpt[nt][i] - s_delta[col]) * g.scale);
        }
      __syncwarp();
#pragma unroll 1  // rolled: see "Loops" above
      for (int kk = 0; kk < C::kBq; kk += 16)
#pragma unroll
        for (int nt = 0; nt < C::kDo / 8; ++nt)
          tile::mma_nmajor(acc_k[nt], sp + kk, C::kLdQ, sq + kk * C::kLd + c0 + nt * 8, C::kLd);
      __syncwarp();
    }
  }
#pragma unroll
  for (int nt = 0; nt < C::kDo / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t key = s0 + warp * 16 + tile::frag_row(i), col = c0 + nt * 8 + tile::frag_col(i);
      if (key < g.s && col < g.d) {
        const std::int64_t at = ((b * g.s + key) * g.hkv + kvh) * g.d + col;
        dk[at] = T(acc_k[nt][i]);
        dv[at] = T(acc_v[nt][i]);
      }
    }
}

AttnShape shape_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, bool causal, double scale,
                   std::int64_t window) {
  DARK_CHECK(window >= 0 && (window == 0 || causal), "flash_attention: window must be >= 0 and needs causal, got ",
             window, causal ? " (causal)" : " (not causal)");
  AttnShape g;
  g.batch = q.shape()[0], g.t = q.shape()[1], g.hq = q.shape()[2], g.d = q.shape()[3];
  g.s = k.shape()[1], g.hkv = k.shape()[2], g.group = g.hq / g.hkv;
  for (int i = 0; i < 3; ++i) g.q_stride[i] = q.stride(i), g.k_stride[i] = k.stride(i), g.v_stride[i] = v.stride(i);
  g.causal = causal;
  g.window = window < g.s ? window : 0;
  g.scale = static_cast<float>(scale);
  g.key_mask = key_mask.defined() ? key_mask.data<std::int32_t>() : nullptr;
  // The bf16 kernels copy 16-byte row pieces (cp.async) when every row starts 16-byte aligned.
  auto aligned = [](const Tensor& x) {
    if (reinterpret_cast<std::uintptr_t>(x.raw_data()) % 16 != 0) return false;
    for (int i = 0; i < 3; ++i)
      if (x.stride(i) % 8 != 0) return false;
    return true;
  };
  g.aligned = g.d % 8 == 0 && aligned(q) && aligned(k) && aligned(v);
  return g;
}

int padded_head_dim(std::int64_t d) {
  for (int kd : {32, 64, 128, 256})
    if (d <= kd) return kd;
  throw Error(str("flash_attention on CUDA: head dimension ", d, " is larger than 256, the largest the kernels support"));
}

// The compute capability of q's GPU as 10 major + minor (90 for an H100 / H200).
int compute_capability(const Tensor& q) {
  int major = 0, minor = 0;
  DARK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q.device().index));
  DARK_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, q.device().index));
  return 10 * major + minor;
}

// bf16 products need tensor cores (mma.sync, compute capability 8.0 and later).
template <class T>
void check_architecture(const Tensor& q) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const int cc = compute_capability(q);
    DARK_CHECK(cc >= 80, "flash_attention: no kernel for cuda/bf16 on ", q.device().to_string(),
               ": bf16 attention needs tensor cores of compute capability 8.0 or newer (this GPU has ", cc / 10, ".",
               cc % 10, "); use training.precision f32");
  }
}

// Whether the bf16 call runs on the wgmma kernels (flash_attention_sm90*.cu): compute
// capability 9.0 in a build that has them, head dimensions 64, 128 and 256, 16-byte-aligned
// rows, and the guard's leave (flash_attention_sm90_guard.h: DARK_FLASH_SM90, the kernels'
// register counts, a self-check against the mma.sync kernels at a configuration's first call).
// Elsewhere the mma.sync kernels (flash_attention_bf16.cu) run.
bool use_sm90(const Tensor& q, const AttnShape& g, int kd, bool backward) {
  if (kd < 64 || !g.aligned || !flash::sm90_built() || compute_capability(q) != 90) return false;
  return flash::sm90_allowed({q.device().index, backward, kd, g.causal, g.window > 0, g.key_mask != nullptr});
}

// f32 through the generic kernels above; bf16 through the tensor-core kernels (use_sm90).
template <class T, int kD>
void forward_padded(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, Tensor& out, Tensor& lse) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (use_sm90(q, g, kD, false))
      flash::forward_sm90(q, k, v, g, kD, out, lse);
    else
      flash::forward_bf16(q, k, v, g, kD, out, lse);
  } else {
    using C = FwdTiles<T, kD>;
    allow_dynamic_shared(flash_forward_kernel<T, kD>, C::kSmem);
    const dim3 grid(static_cast<unsigned>((g.t + C::kBr - 1) / C::kBr), static_cast<unsigned>(g.hq),
                    static_cast<unsigned>(g.batch));
    launch(flash_forward_kernel<T, kD>, {grid, C::kThreads, C::kSmem}, q.data<T>(), k.data<T>(), v.data<T>(), g,
           out.data<T>(), lse.data<float>());
  }
}

template <class T, int kD>
void backward_padded(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                     const Tensor& delta, const AttnShape& g, Tensor& dq, Tensor& dk, Tensor& dv) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const bool dout_aligned = reinterpret_cast<std::uintptr_t>(dout.raw_data()) % 16 == 0;
    if (dout_aligned && use_sm90(q, g, kD, true))
      flash::backward_sm90(q, k, v, dout, lse, delta, g, kD, dq, dk, dv);
    else
      flash::backward_bf16(q, k, v, dout, lse, delta, g, kD, dq, dk, dv);
  } else {
    using C = BwdTiles<T, kD>;
    allow_dynamic_shared(flash_dq_kernel<T, kD>, C::kSmemDq);
    allow_dynamic_shared(flash_dkv_kernel<T, kD>, C::kSmemDkv);
    const dim3 grid_q(static_cast<unsigned>((g.t + C::kBq - 1) / C::kBq), static_cast<unsigned>(g.hq),
                      static_cast<unsigned>(g.batch));
    launch(flash_dq_kernel<T, kD>, {grid_q, C::kQWarps * 32, C::kSmemDq}, q.data<T>(), k.data<T>(), v.data<T>(),
           dout.data<T>(), lse.data<float>(), delta.data<float>(), g, dq.data<T>());
    const dim3 grid_k(static_cast<unsigned>((g.s + C::kBk - 1) / C::kBk * C::kPasses), static_cast<unsigned>(g.hkv),
                      static_cast<unsigned>(g.batch));
    launch(flash_dkv_kernel<T, kD>, {grid_k, C::kKWarps * 32, C::kSmemDkv}, q.data<T>(), k.data<T>(), v.data<T>(),
           dout.data<T>(), lse.data<float>(), delta.data<float>(), g, dk.data<T>(), dv.data<T>());
  }
}

template <class T>
void flash_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, Tensor& out, Tensor& lse,
                   bool causal, double scale, std::int64_t window) {
  check_dtype<T>("flash_attention_forward", {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  DARK_CHECK(lse.dtype() == DType::f32, "flash_attention_forward: lse ", lse.describe(), " must be f32");
  if (q.numel() == 0) return;
  DeviceGuard guard(q);
  check_architecture<T>(q);
  const AttnShape g = shape_of(q, k, v, key_mask, causal, scale, window);
  if (g.s == 0) {  // no key at all: every row sees none
    out.fill_(0.0);
    lse.fill_(-std::numeric_limits<double>::infinity());
    return;
  }
  switch (padded_head_dim(g.d)) {
    case 32: return forward_padded<T, 32>(q, k, v, g, out, lse);
    case 64: return forward_padded<T, 64>(q, k, v, g, out, lse);
    case 128: return forward_padded<T, 128>(q, k, v, g, out, lse);
    default: return forward_padded<T, 256>(q, k, v, g, out, lse);
  }
}

template <class T>
void flash_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, const Tensor& out,
                    const Tensor& lse, const Tensor& dout, const Tensor& dlse, Tensor& dq, Tensor& dk, Tensor& dv,
                    bool causal, double scale, std::int64_t window, bool accumulate) {
  if (accumulate) {  // the tiles store their results: compute them apart, then add
    Tensor part_q = Tensor::empty(dq.shape(), dq.dtype(), dq.device());
    Tensor part_k = Tensor::empty(dk.shape(), dk.dtype(), dk.device());
    Tensor part_v = Tensor::empty(dv.shape(), dv.dtype(), dv.device());
    flash_backward<T>(q, k, v, key_mask, out, lse, dout, dlse, part_q, part_k, part_v, causal, scale, window, false);
    const auto add = kernels::binary().get(DeviceType::cuda, dq.dtype());
    add(BinaryOp::add, dq, part_q, dq);
    add(BinaryOp::add, dk, part_k, dk);
    add(BinaryOp::add, dv, part_v, dv);
    return;
  }
  check_dtype<T>("flash_attention_backward",
                 {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"dout", &dout}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  DARK_CHECK(!dlse.defined() || (dlse.dtype() == DType::f32 && dlse.shape() == lse.shape() && dlse.is_contiguous()),
             "flash_attention_backward: dlse ", dlse.describe(), " must be f32, contiguous and shaped like lse ",
             lse.describe());
  DeviceGuard guard(q);
  check_architecture<T>(q);
  const AttnShape g = shape_of(q, k, v, key_mask, causal, scale, window);
  if (g.t == 0 || g.s == 0 || g.d == 0) {
    dq.fill_(0.0), dk.fill_(0.0), dv.fill_(0.0);
    return;
  }
  Tensor delta = Tensor::empty({g.batch, g.hq, g.t}, DType::f32, q.device());
  const std::int64_t rows = g.batch * g.t * g.hq;
  launch(flash_delta_kernel<T>, {grid_for(rows, kThreads / 32), kThreads}, out.data<T>(), dout.data<T>(),
         dlse.defined() ? dlse.data<float>() : nullptr, delta.data<float>(), rows, g.t, g.hq, g.d);
  switch (padded_head_dim(g.d)) {
    case 32: return backward_padded<T, 32>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    case 64: return backward_padded<T, 64>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    case 128: return backward_padded<T, 128>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    default: return backward_padded<T, 256>(q, k, v, dout, lse, delta, g, dq, dk, dv);
  }
}

DARK_REGISTER_KERNEL(flash_attention_forward, cuda, f32, &flash_forward<float>);
DARK_REGISTER_KERNEL(flash_attention_forward, cuda, bf16, &flash_forward<BFloat16>);
DARK_REGISTER_KERNEL(flash_attention_backward, cuda, f32, &flash_backward<float>);
DARK_REGISTER_KERNEL(flash_attention_backward, cuda, bf16, &flash_backward<BFloat16>);

}  // namespace
}  // namespace dark::cuda
