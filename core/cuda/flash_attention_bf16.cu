// Flash attention in bf16 on the tensor cores, in the FlashAttention-2 design for mma.sync
// GPUs (sm_80 and later, and the CUDA emulator): the same contract and the same
// deterministic two-kernel backward as the f32 kernels of flash_attention.cu, built for
// speed:
//   - tiles move global -> shared with cp.async in 16-byte pieces, the next key (or query)
//     tile loading while the current one is multiplied (two buffers); calls whose rows are
//     not 16-byte aligned (D or a stride not a multiple of 8) load element by element;
//   - every operand goes shared -> registers with ldmatrix (.trans for the n-major B
//     operands V, K and Q), one instruction per 16 x 16 A fragment or pair of B fragments;
//   - the probabilities P and score gradients dS never touch shared memory: an m16n8 C
//     fragment of S is, lane for lane, half of the A fragment of the next product, so P V,
//     dS K, P^T dO and dS^T Q take them from registers (rounded to bf16, as FlashAttention);
//   - the softmax runs in base 2 (exp2 of scores pre-scaled by scale log2(e)); only tiles
//     that cross the causal diagonal, the window's edge, the sequence end or a key mask
//     evaluate the mask per element.
// Forward: a block of 4 warps per kBr queries (each warp owns 16 kRowTiles rows), walking the
// key tiles its queries see with an online softmax. Backward: dQ per query tile over the key
// tiles; dK, dV per key tile over the group's query heads and their query tiles, in a fixed
// order (no atomics: the same inputs give the same bits every run).
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cuda/async_copy.cuh"
#include "core/cuda/flash_attention.cuh"
#include "core/cuda/flash_tiles.cuh"
#include "core/cuda/tile_mma.cuh"

namespace dark::cuda::flash {
namespace {

using bf16 = BFloat16;
constexpr int kWarps = 4, kThreads = 128;

// Rows [0, kRows) of a head's (L, D) matrix (row r at src + r * row_stride) as a kRows x kD
// tile with leading dimension kD + 8 (16-byte rows that ldmatrix reads without bank
// conflicts); zeros past rows_left rows and d columns. cp.async when `aligned` (the caller
// commits and waits), else plain loads.
template <int kD, int kRows>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, std::int64_t row_stride, std::int64_t rows_left,
                                          std::int64_t d, bool aligned) {
  constexpr int kLd = kD + 8, kPieces = kD / 8;
  if (aligned) {
    for (int idx = threadIdx.x; idx < kRows * kPieces; idx += kThreads) {
      const int r = idx / kPieces, c = idx % kPieces * 8;
      const bool valid = r < rows_left && c < d;
      async::copy_16(dst + r * kLd + c, valid ? src + r * row_stride + c : src, valid);
    }
  } else {
    for (int idx = threadIdx.x; idx < kRows * kD; idx += kThreads) {
      const int r = idx / kD, c = idx % kD;
      dst[r * kLd + c] = (r < rows_left && c < d) ? src[r * row_stride + c] : bf16(0.0f);
    }
  }
}


// The key tiles a block of queries [t0, t0 + rows) walks (from the first tile of the first
// query's window to the last key the last query sees), double-buffered in shared memory:
// buffer i & 1 of `kv` holds K of tile i, then V (2 kCols rows of kD + 8 elements).
template <int kD, int kCols>
struct KeyTiles {
  static constexpr int kLd = kD + 8;
  std::int64_t begin;
  int count;

  __device__ KeyTiles(const AttnShape& g, std::int64_t t0, int rows) : begin(g.first_key_tile(t0, kCols)) {
    const std::int64_t end = g.key_end(t0, rows);
    count = end > begin ? static_cast<int>((end - begin + kCols - 1) / kCols) : 0;
  }
  __device__ std::int64_t start(int i) const { return begin + static_cast<std::int64_t>(i) * kCols; }
  __device__ static bf16* keys(bf16* kv, int i) { return kv + 2 * (i & 1) * kCols * kLd; }
  __device__ static bf16* values(bf16* kv, int i) { return keys(kv, i) + kCols * kLd; }
  // Issues the loads of tile i (K rows from kh, V rows from vh: the head's first rows).
  __device__ void load(int i, bf16* kv, const bf16* kh, const bf16* vh, const AttnShape& g) const {
    const std::int64_t s0 = start(i);
    load_tile<kD, kCols>(keys(kv, i), kh + s0 * g.k_stride[1], g.k_stride[1], g.s - s0, g.d, g.aligned);
    load_tile<kD, kCols>(values(kv, i), vh + s0 * g.v_stride[1], g.v_stride[1], g.s - s0, g.d, g.aligned);
  }
};

// ldmatrix addresses (tile_mma.cuh): lane l passes row l % 8 of matrix l / 8.
// The A fragment of rows [row0, row0 + 16) and columns [col0, col0 + 16) of a row-major tile.
__device__ __forceinline__ void a_fragment(std::uint32_t (&a)[4], const bf16* tile, int ld, int row0, int col0) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  tile::ldmatrix_x4(a, tile + (row0 + lane % 8 + (lane / 8 & 1) * 8) * ld + col0 + lane / 16 * 8);
}
// The B fragments of two 8-column tiles, (b[0], b[1]) for columns n0 .. n0 + 7 and (b[2], b[3])
// for n0 + 8 .. n0 + 15, k in [k0, k0 + 16), of an operand stored k-major (row n holds B's
// column n, as K for Q K^T): b[i] = B[k][n] at tile[n * ld + k].
__device__ __forceinline__ void b_fragments_kmajor(std::uint32_t (&b)[4], const bf16* tile, int ld, int n0, int k0) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  tile::ldmatrix_x4(b, tile + (n0 + lane % 8 + lane / 16 * 8) * ld + k0 + (lane / 8 & 1) * 8);
}
// The same for an operand stored n-major (row k holds B's row k, as V for P V).
__device__ __forceinline__ void b_fragments_nmajor(std::uint32_t (&b)[4], const bf16* tile, int ld, int n0, int k0) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  tile::ldmatrix_x4_trans(b, tile + (k0 + lane % 8 + (lane / 8 & 1) * 8) * ld + n0 + lane / 16 * 8);
}
// acc[n], acc[n + 1] += A B for a pair of B fragments.
__device__ __forceinline__ void mma_pair(float (&acc0)[4], float (&acc1)[4], const std::uint32_t (&a)[4],
                                         const std::uint32_t (&b)[4]) {
  const std::uint32_t lo[2] = {b[0], b[1]}, hi[2] = {b[2], b[3]};
  tile::mma_bf16(acc0, a, lo);
  tile::mma_bf16(acc1, a, hi);
}
// ---------------------------------------------------------------- forward

template <int kD>
struct Fwd {
  static constexpr int kRowTiles = kD <= 64 ? 2 : 1;  // 16-row tiles per warp: more reuse of each K, V fragment
  static constexpr int kBr = 16 * kRowTiles * kWarps;
  static constexpr int kBc = kD <= 128 ? 64 : 32;
  static constexpr int kLd = kD + 8;
  static constexpr std::size_t kSmem = static_cast<std::size_t>(kBr + 4 * kBc) * kLd * sizeof(bf16);
};

// grid (ceil(T / kBr), Hq, B), block kThreads.
template <int kD>
__global__ void __launch_bounds__(kThreads) forward_kernel(const bf16* q, const bf16* k, const bf16* v, AttnShape g,
                                                           bf16* out, float* lse) {
  using C = Fwd<kD>;
  constexpr int kRT = C::kRowTiles;
  DARK_DYNAMIC_SHARED(bf16, smem);
  bf16* sq = smem;
  bf16* skv = sq + C::kBr * C::kLd;  // the key tiles' two buffers (KeyTiles)
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const std::int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * C::kBr;
  const int row0 = warp * 16 * kRT;  // the warp's first row in the tile
  const bf16* kh = k + b * g.k_stride[0] + kvh * g.k_stride[2];
  const bf16* vh = v + b * g.v_stride[0] + kvh * g.v_stride[2];
  load_tile<kD, C::kBr>(sq, q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1], g.q_stride[1], g.t - t0,
                        g.d, g.aligned);
  const KeyTiles<kD, C::kBc> tiles(g, t0, C::kBr);
  if (tiles.count > 0) tiles.load(0, skv, kh, vh, g);
  async::commit();

  const float scale_log2 = g.scale * kLog2e;
  float o[kRT][kD / 8][4] = {};
  float m[kRT][2], l[kRT][2] = {};
#pragma unroll
  for (int mt = 0; mt < kRT; ++mt) m[mt][0] = m[mt][1] = kNegInf;
  for (int i = 0; i < tiles.count; ++i) {
    if (i + 1 < tiles.count) tiles.load(i + 1, skv, kh, vh, g);
    async::commit();
    async::wait<1>();  // tile i (and the queries) have landed
    __syncthreads();
    const bf16* sk = tiles.keys(skv, i);
    const bf16* sv = tiles.values(skv, i);
    const std::int64_t s0 = tiles.start(i);

    float sc[kRT][C::kBc / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < kD; kk += 16) {
      std::uint32_t a[kRT][4];
#pragma unroll
      for (int mt = 0; mt < kRT; ++mt) a_fragment(a[mt], sq, C::kLd, row0 + 16 * mt, kk);
#pragma unroll
      for (int np = 0; np < C::kBc / 16; ++np) {
        std::uint32_t bk[4];
        b_fragments_kmajor(bk, sk, C::kLd, 16 * np, kk);
#pragma unroll
        for (int mt = 0; mt < kRT; ++mt) mma_pair(sc[mt][2 * np], sc[mt][2 * np + 1], a[mt], bk);
      }
    }
    const bool unmasked = g.all_visible(t0 + row0, t0 + row0 + 16 * kRT, s0, s0 + C::kBc);
#pragma unroll
    for (int mt = 0; mt < kRT; ++mt) {
      float correction[2];
      online_softmax_step<C::kBc>(sc[mt], m[mt], l[mt], correction, scale_log2, unmasked, [&](int row, int col) {
        return g.visible(b, t0 + row0 + 16 * mt + row, s0 + col);
      });
      rescale(o[mt], correction);
    }
#pragma unroll
    for (int kk = 0; kk < C::kBc / 16; ++kk) {
      std::uint32_t a[kRT][4];
#pragma unroll
      for (int mt = 0; mt < kRT; ++mt) a_from_accumulators(a[mt], sc[mt][2 * kk], sc[mt][2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kD / 16; ++np) {
        std::uint32_t bv[4];
        b_fragments_nmajor(bv, sv, C::kLd, 16 * np, 16 * kk);
#pragma unroll
        for (int mt = 0; mt < kRT; ++mt) mma_pair(o[mt][2 * np], o[mt][2 * np + 1], a[mt], bv);
      }
    }
    __syncthreads();  // every warp is done with buffer i & 1 before tile i + 2 loads into it
  }
  async::wait<0>();  // no copy may still be in flight when the block exits

#pragma unroll
  for (int mt = 0; mt < kRT; ++mt) store_rows(o[mt], m[mt], l[mt], g, b, h, t0 + row0 + 16 * mt, out, lse);
}

// ---------------------------------------------------------------- backward

template <int kD>
struct Bwd {
  static constexpr int kBq = 64;                   // dQ kernel: queries per block (16 per warp)
  static constexpr int kBk = kD <= 128 ? 64 : 32;  // dQ kernel: keys per tile
  static constexpr int kBkv = 64;                  // dK dV kernel: keys per block (16 per warp)
  static constexpr int kBqv = kD <= 64 ? 64 : 32;  // dK dV kernel: queries per tile
  static constexpr int kDo = kD > 128 ? 128 : kD;  // dK, dV columns per block (registers)
  static constexpr int kPasses = kD / kDo;
  static constexpr int kLd = kD + 8;
  static constexpr std::size_t kSmemDq =
      static_cast<std::size_t>(2 * kBq + 4 * kBk) * kLd * sizeof(bf16) + 2 * kBq * sizeof(float);
  static constexpr std::size_t kSmemDkv =
      static_cast<std::size_t>(2 * kBkv + 4 * kBqv) * kLd * sizeof(bf16) + 4 * kBqv * sizeof(float);
};

// dQ: grid (ceil(T / kBq), Hq, B).
template <int kD>
__global__ void __launch_bounds__(kThreads) dq_kernel(const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                                                      const float* lse, const float* delta, AttnShape g, bf16* dq) {
  using C = Bwd<kD>;
  DARK_DYNAMIC_SHARED(bf16, smem);
  bf16* sq = smem;
  bf16* sdo = sq + C::kBq * C::kLd;
  bf16* skv = sdo + C::kBq * C::kLd;  // the key tiles' two buffers (KeyTiles)
  float* s_lse = reinterpret_cast<float*>(skv + 4 * C::kBk * C::kLd);
  float* s_delta = s_lse + C::kBq;
  const int warp = static_cast<int>(threadIdx.x) / 32, row0 = warp * 16;
  const std::int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * C::kBq;
  const bf16* kh = k + b * g.k_stride[0] + kvh * g.k_stride[2];
  const bf16* vh = v + b * g.v_stride[0] + kvh * g.v_stride[2];
  load_tile<kD, C::kBq>(sq, q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1], g.q_stride[1], g.t - t0,
                        g.d, g.aligned);
  load_tile<kD, C::kBq>(sdo, dout + ((b * g.t + t0) * g.hq + h) * g.d, g.hq * g.d, g.t - t0, g.d, g.aligned);
  load_stats<C::kBq, kThreads>(static_cast<int>(threadIdx.x), s_lse, lse + (b * g.hq + h) * g.t + t0,
                               rows_in_tile(g.t, t0, C::kBq), kLog2e);
  load_stats<C::kBq, kThreads>(static_cast<int>(threadIdx.x), s_delta, delta + (b * g.hq + h) * g.t + t0,
                               rows_in_tile(g.t, t0, C::kBq), 1.0f);
  const KeyTiles<kD, C::kBk> tiles(g, t0, C::kBq);
  if (tiles.count > 0) tiles.load(0, skv, kh, vh, g);
  async::commit();

  const float scale_log2 = g.scale * kLog2e;
  float acc[kD / 8][4] = {};
  for (int i = 0; i < tiles.count; ++i) {
    if (i + 1 < tiles.count) tiles.load(i + 1, skv, kh, vh, g);
    async::commit();
    async::wait<1>();
    __syncthreads();
    const bf16* sk = tiles.keys(skv, i);
    const bf16* sv = tiles.values(skv, i);
    const std::int64_t s0 = tiles.start(i);
    float sc[C::kBk / 8][4] = {}, dp[C::kBk / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < kD; kk += 16) {
      std::uint32_t aq[4], ado[4];
      a_fragment(aq, sq, C::kLd, row0, kk);
      a_fragment(ado, sdo, C::kLd, row0, kk);
#pragma unroll
      for (int np = 0; np < C::kBk / 16; ++np) {
        std::uint32_t bk[4], bv[4];
        b_fragments_kmajor(bk, sk, C::kLd, 16 * np, kk);
        b_fragments_kmajor(bv, sv, C::kLd, 16 * np, kk);
        mma_pair(sc[2 * np], sc[2 * np + 1], aq, bk);
        mma_pair(dp[2 * np], dp[2 * np + 1], ado, bv);
      }
    }
    const bool unmasked = g.all_visible(t0 + row0, t0 + row0 + 16, s0, s0 + C::kBk);
    softmax_backward_step<C::kBk, false>(sc, dp, s_lse, s_delta, row0, scale_log2, g.scale, unmasked,
                                         [&](int row, int col) { return g.visible(b, t0 + row0 + row, s0 + col); });
#pragma unroll
    for (int kk = 0; kk < C::kBk / 16; ++kk) {
      std::uint32_t a[4];
      a_from_accumulators(a, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kD / 16; ++np) {
        std::uint32_t bk[4];
        b_fragments_nmajor(bk, sk, C::kLd, 16 * np, 16 * kk);
        mma_pair(acc[2 * np], acc[2 * np + 1], a, bk);
      }
    }
    __syncthreads();
  }
  async::wait<0>();
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::int64_t tq = t0 + row0 + tile::frag_row(e), col = nt * 8 + tile::frag_col(e);
      if (tq < g.t && col < g.d) dq[((b * g.t + tq) * g.hq + h) * g.d + col] = bf16(acc[nt][e]);
    }
}

// dK, dV: grid (ceil(S / kBkv) * kPasses, Hkv, B); pass p writes columns [p kDo, (p + 1) kDo).
template <int kD>
__global__ void __launch_bounds__(kThreads) dkv_kernel(const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                                                       const float* lse, const float* delta, AttnShape g, bf16* dk,
                                                       bf16* dv) {
  using C = Bwd<kD>;
  DARK_DYNAMIC_SHARED(bf16, smem);
  bf16* sk = smem;
  bf16* sv = sk + C::kBkv * C::kLd;
  bf16* sqd = sv + C::kBkv * C::kLd;  // buffer i: Q at sqd + 2 i kBqv kLd, dO after it
  float* stats = reinterpret_cast<float*>(sqd + 4 * C::kBqv * C::kLd);  // buffer i: lse, Delta at stats + 2 i kBqv
  const int warp = static_cast<int>(threadIdx.x) / 32, row0 = warp * 16;
  const std::int64_t kvh = blockIdx.y, b = blockIdx.z;
  const int c0 = static_cast<int>(blockIdx.x % C::kPasses) * C::kDo;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x / C::kPasses) * C::kBkv;
  load_tile<kD, C::kBkv>(sk, k + b * g.k_stride[0] + kvh * g.k_stride[2] + s0 * g.k_stride[1], g.k_stride[1], g.s - s0,
                         g.d, g.aligned);
  load_tile<kD, C::kBkv>(sv, v + b * g.v_stride[0] + kvh * g.v_stride[2] + s0 * g.v_stride[1], g.v_stride[1], g.s - s0,
                         g.d, g.aligned);
  // The query tiles of every head of the group that see some key of this block, in order.
  const std::int64_t q_first = g.causal ? std::max<std::int64_t>(0, s0 - (g.s - g.t)) / C::kBqv * C::kBqv : 0;
  const std::int64_t q_end = g.query_end(std::min(g.s, s0 + C::kBkv) - 1);
  const int per_head = q_end > q_first ? static_cast<int>((q_end - q_first + C::kBqv - 1) / C::kBqv) : 0;
  const int tiles = per_head * static_cast<int>(g.group);
  auto tile_start = [&](int i) { return q_first + static_cast<std::int64_t>(i % per_head) * C::kBqv; };
  auto tile_head = [&](int i) { return kvh * g.group + i / per_head; };
  auto load_queries = [&](int i) {
    const std::int64_t t0 = tile_start(i), h = tile_head(i);
    bf16* buf = sqd + 2 * (i & 1) * C::kBqv * C::kLd;
    load_tile<kD, C::kBqv>(buf, q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1], g.q_stride[1],
                           g.t - t0, g.d, g.aligned);
    load_tile<kD, C::kBqv>(buf + C::kBqv * C::kLd, dout + ((b * g.t + t0) * g.hq + h) * g.d, g.hq * g.d, g.t - t0, g.d,
                           g.aligned);
    float* st = stats + 2 * (i & 1) * C::kBqv;
    load_stats<C::kBqv, kThreads>(static_cast<int>(threadIdx.x), st, lse + (b * g.hq + h) * g.t + t0,
                                  rows_in_tile(g.t, t0, C::kBqv), kLog2e);
    load_stats<C::kBqv, kThreads>(static_cast<int>(threadIdx.x), st + C::kBqv, delta + (b * g.hq + h) * g.t + t0,
                                  rows_in_tile(g.t, t0, C::kBqv), 1.0f);
  };
  if (tiles > 0) load_queries(0);
  async::commit();

  const float scale_log2 = g.scale * kLog2e;
  float acc_k[C::kDo / 8][4] = {}, acc_v[C::kDo / 8][4] = {};
  for (int i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) load_queries(i + 1);
    async::commit();
    async::wait<1>();
    __syncthreads();
    const bf16* sq = sqd + 2 * (i & 1) * C::kBqv * C::kLd;
    const bf16* sdo = sq + C::kBqv * C::kLd;
    const float* s_lse = stats + 2 * (i & 1) * C::kBqv;
    const float* s_delta = s_lse + C::kBqv;
    const std::int64_t t0 = tile_start(i);
    // Rows are this warp's 16 keys, columns the tile's queries: S^T = K Q^T, dP^T = V dO^T.
    float pt[C::kBqv / 8][4] = {}, dpt[C::kBqv / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < kD; kk += 16) {
      std::uint32_t ak[4], av[4];
      a_fragment(ak, sk, C::kLd, row0, kk);
      a_fragment(av, sv, C::kLd, row0, kk);
#pragma unroll
      for (int np = 0; np < C::kBqv / 16; ++np) {
        std::uint32_t bq[4], bdo[4];
        b_fragments_kmajor(bq, sq, C::kLd, 16 * np, kk);
        b_fragments_kmajor(bdo, sdo, C::kLd, 16 * np, kk);
        mma_pair(pt[2 * np], pt[2 * np + 1], ak, bq);
        mma_pair(dpt[2 * np], dpt[2 * np + 1], av, bdo);
      }
    }
    const bool unmasked = g.all_visible(t0, t0 + C::kBqv, s0 + row0, s0 + row0 + 16);
    softmax_backward_step<C::kBqv, true>(pt, dpt, s_lse, s_delta, 0, scale_log2, g.scale, unmasked,
                                         [&](int row, int col) { return g.visible(b, t0 + col, s0 + row0 + row); });
    // dV += P^T dO, dK += dS^T Q (k = the tile's queries).
#pragma unroll
    for (int kk = 0; kk < C::kBqv / 16; ++kk) {
      std::uint32_t ap[4], ads[4];
      a_from_accumulators(ap, pt[2 * kk], pt[2 * kk + 1]);
      a_from_accumulators(ads, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < C::kDo / 16; ++np) {
        std::uint32_t bdo[4], bq[4];
        b_fragments_nmajor(bdo, sdo, C::kLd, c0 + 16 * np, 16 * kk);
        b_fragments_nmajor(bq, sq, C::kLd, c0 + 16 * np, 16 * kk);
        mma_pair(acc_v[2 * np], acc_v[2 * np + 1], ap, bdo);
        mma_pair(acc_k[2 * np], acc_k[2 * np + 1], ads, bq);
      }
    }
    __syncthreads();
  }
  async::wait<0>();
#pragma unroll
  for (int nt = 0; nt < C::kDo / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::int64_t key = s0 + row0 + tile::frag_row(e), col = c0 + nt * 8 + tile::frag_col(e);
      if (key < g.s && col < g.d) {
        const std::int64_t at = ((b * g.s + key) * g.hkv + kvh) * g.d + col;
        dk[at] = bf16(acc_k[nt][e]);
        dv[at] = bf16(acc_v[nt][e]);
      }
    }
}

template <int kD>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, Tensor& out, Tensor& lse) {
  using C = Fwd<kD>;
  allow_dynamic_shared(forward_kernel<kD>, C::kSmem);
  const dim3 grid(static_cast<unsigned>((g.t + C::kBr - 1) / C::kBr), static_cast<unsigned>(g.hq),
                  static_cast<unsigned>(g.batch));
  launch(forward_kernel<kD>, {grid, kThreads, C::kSmem}, q.data<bf16>(), k.data<bf16>(), v.data<bf16>(), g,
         out.data<bf16>(), lse.data<float>());
}

template <int kD>
void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
              const Tensor& delta, const AttnShape& shape, Tensor& dq, Tensor& dk, Tensor& dv) {
  using C = Bwd<kD>;
  AttnShape g = shape;  // dO's rows are copied like Q's: 16-byte aligned only if its start is
  g.aligned = g.aligned && reinterpret_cast<std::uintptr_t>(dout.raw_data()) % 16 == 0;
  allow_dynamic_shared(dq_kernel<kD>, C::kSmemDq);
  allow_dynamic_shared(dkv_kernel<kD>, C::kSmemDkv);
  const dim3 grid_q(static_cast<unsigned>((g.t + C::kBq - 1) / C::kBq), static_cast<unsigned>(g.hq),
                    static_cast<unsigned>(g.batch));
  launch(dq_kernel<kD>, {grid_q, kThreads, C::kSmemDq}, q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
         dout.data<bf16>(), lse.data<float>(), delta.data<float>(), g, dq.data<bf16>());
  const dim3 grid_k(static_cast<unsigned>((g.s + C::kBkv - 1) / C::kBkv * C::kPasses), static_cast<unsigned>(g.hkv),
                    static_cast<unsigned>(g.batch));
  launch(dkv_kernel<kD>, {grid_k, kThreads, C::kSmemDkv}, q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
         dout.data<bf16>(), lse.data<float>(), delta.data<float>(), g, dk.data<bf16>(), dv.data<bf16>());
}

}  // namespace

void forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, int kd, Tensor& out,
                  Tensor& lse) {
  switch (kd) {
    case 32: return forward<32>(q, k, v, g, out, lse);
    case 64: return forward<64>(q, k, v, g, out, lse);
    case 128: return forward<128>(q, k, v, g, out, lse);
    default: return forward<256>(q, k, v, g, out, lse);
  }
}

void backward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                   const Tensor& delta, const AttnShape& g, int kd, Tensor& dq, Tensor& dk, Tensor& dv) {
  switch (kd) {
    case 32: return backward<32>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    case 64: return backward<64>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    case 128: return backward<128>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    default: return backward<256>(q, k, v, dout, lse, delta, g, dq, dk, dv);
  }
}

}  // namespace dark::cuda::flash
