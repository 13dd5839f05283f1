// Flash attention's bf16 backward for Hopper (sm_90a): the two deterministic kernels of
// flash_attention_bf16.cu (dQ per query block; dK, dV per key block over the group's query
// heads and tiles in a fixed order: no atomics, the same bits every run) with their products
// on wgmma (wgmma.cuh), tiles in the 128-byte swizzled layout. Each product fits one of two
// forms: both operands K-major in shared memory (S = Q K^T and dP = dO V^T, or their
// transposes), or the A operand in registers (the probabilities or score gradients, an
// accumulator being half of the next A fragment) times an MN-major tile (dQ += dS K,
// dV += P^T dO, dK += dS^T Q).
// Warp-specialised as the forward is (tile_pipeline.cuh): a block is two computing
// warpgroups of 64 rows (queries for dQ, keys for dK, dV) with 232 registers a thread (240
// for dK, dV at d 256), and a loading warpgroup with 40 (24) that copies the block's fixed
// operands once (dQ: Q, dO and their statistics; dK, dV: K and V) and the streamed tiles
// (dQ: K and V; dK, dV: Q, dO and their statistics) into three buffers, handing them over
// through mbarriers; a computing warpgroup skips the products of a tile none of its rows
// meets (causal) and runs at its own pace.
// Used where the forward of flash_attention_sm90.cu is: d 64, 128 and 256,
// 16-byte-aligned rows, compute capability 9.0. At d 256 a dK, dV block writes half the
// columns (two blocks per key block, each recomputing S^T and dP^T, as the mma.sync kernel
// does), for registers.
#include <cstdint>
#include <type_traits>

#include "core/cuda/async_copy.cuh"
#include "core/cuda/flash_attention.cuh"
#include "core/cuda/flash_tiles.cuh"
#include "core/cuda/tile_pipeline.cuh"
#include "core/cuda/wgmma.cuh"

namespace dark::cuda::flash {
namespace {

using bf16 = BFloat16;
constexpr int kThreads = 384;  // two computing warpgroups, then the loading one
constexpr int kLoader = 2;     // the loading warpgroup's index
constexpr int kStages = 3;     // streamed tiles in shared memory at once: the loader runs two ahead
constexpr unsigned kComputingWarps = 8;

// 1024-byte aligned start of the dynamic shared memory (the swizzle's pattern).
__device__ __forceinline__ unsigned char* aligned_shared(unsigned char* raw) {
  return raw + (1024 - wgmma::shared_address(raw) % 1024) % 1024;
}

// The warp's 16 rows x kD columns of a gradient (C-fragment layout), as bf16 rows of
// row_stride elements from `rows` (row r of the warp at rows + r * row_stride), rows past
// rows_left skipped.
template <int kD>
__device__ __forceinline__ void store_gradient(const float (&acc)[kD / 8][4], bf16* rows, std::int64_t row_stride,
                                               std::int64_t rows_left, std::int64_t d) {
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = tile::frag_row(e), col = nt * 8 + tile::frag_col(e);
      if (r < rows_left && col < d) rows[r * row_stride + col] = bf16(acc[nt][e]);
    }
}

// ---------------------------------------------------------------- dQ

template <int kD>
struct Sm90Dq {
  static constexpr int kBq = 128;  // queries per block, 64 per warpgroup
  static constexpr int kBk = kD <= 128 ? 64 : 32;  // keys per tile (shared memory at d 256)
  static constexpr std::uint32_t kQBytes = kBq * kD * sizeof(bf16);  // Q, and dO
  static constexpr std::uint32_t kKBytes = kBk * kD * sizeof(bf16);  // one K or V tile
  using Registers = pipeline::RoomyLoader;
  // Q, dO and their statistics once (copies and plain stores); K and V tiles streamed.
  struct Barriers {
    pipeline::TilePipeline<1> queries;
    pipeline::TilePipeline<kStages> keys;
  };
  static constexpr std::size_t kSmem =
      1024 + 2 * kQBytes + 2 * kStages * kKBytes + 2 * kBq * sizeof(float) + sizeof(Barriers);
  static_assert(kSmem <= 227 * 1024, "more shared memory than a block of an H100 / H200 may have");
};

// grid (ceil(T / kBq), Hq, B).
template <int kD>
__global__ void __launch_bounds__(kThreads, 1)
    dq_sm90_kernel(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse, const float* delta,
                   AttnShape g, bf16* dq, std::uint64_t* hang_word) {
  using C = Sm90Dq<kD>;
  DARK_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* const sq = aligned_shared(raw);
  unsigned char* const sdo = sq + C::kQBytes;
  unsigned char* const skv = sdo + C::kQBytes;  // buffer i % kStages: K at skv + 2 (i % kStages) kKBytes, V after it
  float* const s_lse = reinterpret_cast<float*>(skv + 2 * kStages * C::kKBytes);
  float* const s_delta = s_lse + C::kBq;
  auto* const bars = reinterpret_cast<typename C::Barriers*>(s_delta + C::kBq);
  auto keys = [&](int i) { return skv + 2 * (i % kStages) * C::kKBytes; };
  auto values = [&](int i) { return keys(i) + C::kKBytes; };

  const int group = static_cast<int>(threadIdx.x) / 128, warp = static_cast<int>(threadIdx.x) / 32 % 4;
  const int row_in_block = 64 * group + 16 * warp;  // the warp's first row
  const std::int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * C::kBq, row0 = t0 + row_in_block;
  const std::int64_t begin = g.first_key_tile(t0, C::kBk), end = g.key_end(t0, C::kBq);
  const int tiles = end > begin ? static_cast<int>((end - begin + C::kBk - 1) / C::kBk) : 0;

  if (threadIdx.x == 0) {
    // each loading thread's copies, then its stores
    bars->queries.init(2 * 128, kComputingWarps, hang::site(hang::flash_dq, kD, 0), hang_word);
    bars->keys.init(128, kComputingWarps, hang::site(hang::flash_dq, kD, 1), hang_word);
  }
  __syncthreads();  // the barriers are set up; from here on no block-wide barrier

  if (group == kLoader) {
    mbarrier::shrink_registers<C::Registers::kLoaderRegisters>();
    const int thread = static_cast<int>(threadIdx.x) - 128 * kLoader, d = static_cast<int>(g.d);
    const int query_rows = rows_in_tile(g.t, t0, C::kBq);
    wgmma::load_swizzled<kD, C::kBq, 128>(thread, sq, q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1],
                                          g.q_stride[1], query_rows, d);
    wgmma::load_swizzled<kD, C::kBq, 128>(thread, sdo, dout + ((b * g.t + t0) * g.hq + h) * g.d, g.hq * g.d,
                                          query_rows, d);
    bars->queries.copies_issued(0, 0);
    load_stats<C::kBq, 128>(thread, s_lse, lse + (b * g.hq + h) * g.t + t0, query_rows, kLog2e);
    load_stats<C::kBq, 128>(thread, s_delta, delta + (b * g.hq + h) * g.t + t0, query_rows, 1.0f);
    bars->queries.stores_done(0, 0);
    const bf16* kh = k + b * g.k_stride[0] + kvh * g.k_stride[2];
    const bf16* vh = v + b * g.v_stride[0] + kvh * g.v_stride[2];
    for (int i = 0; i < tiles; ++i) {
      const std::int64_t s0 = begin + static_cast<std::int64_t>(i) * C::kBk;
      const int rows = rows_in_tile(g.s, s0, C::kBk);
      bars->keys.wait_free(i);
      wgmma::load_swizzled<kD, C::kBk, 128>(thread, keys(i), kh + s0 * g.k_stride[1], g.k_stride[1], rows, d);
      wgmma::load_swizzled<kD, C::kBk, 128>(thread, values(i), vh + s0 * g.v_stride[1], g.v_stride[1], rows, d);
      bars->keys.copies_issued(0, i);
    }
    async::commit();
    async::wait<0>();  // no copy may still be in flight when the thread exits
    bars->keys.wait_finished();  // bounded: a computing warp that hangs ends the kernel here
    return;
  }

  mbarrier::grow_registers<C::Registers::kComputeRegisters>();
  const std::uint32_t q_tile = wgmma::shared_address(sq), do_tile = wgmma::shared_address(sdo);
  const float scale_log2 = g.scale * kLog2e;
  float acc[kD / 8][4] = {};
  bars->queries.wait_landed(0, 0);
  for (int i = 0; i < tiles; ++i) {
    bars->keys.wait_landed(0, i);
    const std::int64_t s0 = begin + static_cast<std::int64_t>(i) * C::kBk;
    if (!g.causal || s0 <= t0 + 64 * group + 63 + (g.s - g.t)) {  // some row of this warpgroup sees the tile
      const std::uint32_t k_tile = wgmma::shared_address(keys(i)), v_tile = wgmma::shared_address(values(i));
      float sc[C::kBk / 8][4], dp[C::kBk / 8][4];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kD; kk += 16) {
        wgmma::mma_ss<C::kBk>(sc, wgmma::kmajor(q_tile, C::kBq, 64 * group, kk), wgmma::kmajor(k_tile, C::kBk, 0, kk),
                              kk > 0);
        wgmma::mma_ss<C::kBk>(dp, wgmma::kmajor(do_tile, C::kBq, 64 * group, kk),
                              wgmma::kmajor(v_tile, C::kBk, 0, kk), kk > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::hold(sc);
      wgmma::hold(dp);
      const bool unmasked = g.all_visible(row0, row0 + 16, s0, s0 + C::kBk);
      softmax_backward_step<C::kBk, false>(sc, dp, s_lse, s_delta, row_in_block, scale_log2, g.scale, unmasked,
                                           [&](int row, int col) { return g.visible(b, row0 + row, s0 + col); });
      std::uint32_t a[C::kBk / 16][4];
#pragma unroll
      for (int kk = 0; kk < C::kBk / 16; ++kk) a_from_accumulators(a[kk], dp[2 * kk], dp[2 * kk + 1]);
      wgmma::hold(acc);
      wgmma::hold(a);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < C::kBk / 16; ++kk)
        wgmma::mma_rs<kD>(acc, a[kk], wgmma::mnmajor(k_tile, C::kBk, 16 * kk), true);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::hold(acc);
    }
    bars->keys.release(i);  // this warp's products reading the tile are done (or skipped)
  }
  bars->keys.finish();
  store_gradient<kD>(acc, dq + ((b * g.t + row0) * g.hq + h) * g.d, g.hq * g.d, g.t - row0, g.d);
}

// ---------------------------------------------------------------- dK, dV

template <int kD>
struct Sm90Dkv {
  static constexpr int kBkv = 128;  // keys per block, 64 per warpgroup
  static constexpr int kBq = kD <= 64 ? 64 : 32;  // queries per tile (at d 128, 64 would spill)
  static constexpr int kDo = kD <= 128 ? kD : 128;  // dK, dV columns per block (registers)
  static constexpr int kPasses = kD / kDo;
  // The computing code at d 256 needs more than 232 registers.
  using Registers = std::conditional_t<kD <= 128, pipeline::RoomyLoader, pipeline::RoomyCompute>;
  static constexpr std::uint32_t kKBytes = kBkv * kD * sizeof(bf16);  // K, and V
  static constexpr std::uint32_t kQBytes = kBq * kD * sizeof(bf16);   // one Q or dO tile
  // K and V once; Q and dO tiles with their statistics (copies and plain stores) streamed.
  struct Barriers {
    pipeline::TilePipeline<1> keys;
    pipeline::TilePipeline<kStages> queries;
  };
  static constexpr std::size_t kSmem =
      1024 + 2 * kKBytes + 2 * kStages * kQBytes + 2 * kStages * kBq * sizeof(float) + sizeof(Barriers);
  static_assert(kSmem <= 227 * 1024, "more shared memory than a block of an H100 / H200 may have");
};

// grid (ceil(S / kBkv) * kPasses, Hkv, B); pass p writes columns [p kDo, (p + 1) kDo).
template <int kD>
__global__ void __launch_bounds__(kThreads, 1)
    dkv_sm90_kernel(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse,
                    const float* delta, AttnShape g, bf16* dk, bf16* dv, std::uint64_t* hang_word) {
  using C = Sm90Dkv<kD>;
  DARK_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* const sk = aligned_shared(raw);
  unsigned char* const sv = sk + C::kKBytes;
  unsigned char* const sqd = sv + C::kKBytes;  // buffer i % kStages: Q at sqd + 2 (i % kStages) kQBytes, dO after it
  // buffer i % kStages: lse, Delta at stats + 2 (i % kStages) kBq
  float* const stats = reinterpret_cast<float*>(sqd + 2 * kStages * C::kQBytes);
  auto* const bars = reinterpret_cast<typename C::Barriers*>(stats + 2 * kStages * C::kBq);
  auto queries = [&](int i) { return sqd + 2 * (i % kStages) * C::kQBytes; };
  auto grads = [&](int i) { return queries(i) + C::kQBytes; };
  auto tile_stats = [&](int i) { return stats + 2 * (i % kStages) * C::kBq; };

  const int group = static_cast<int>(threadIdx.x) / 128, warp = static_cast<int>(threadIdx.x) / 32 % 4;
  const int row_in_block = 64 * group + 16 * warp;  // the warp's first key
  const std::int64_t kvh = blockIdx.y, b = blockIdx.z;
  const int c0 = static_cast<int>(blockIdx.x % C::kPasses) * C::kDo;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x / C::kPasses) * C::kBkv, key0 = s0 + row_in_block;
  // The query tiles of every head of the group that see some key of this block, in order.
  const std::int64_t q_first = g.causal ? std::max<std::int64_t>(0, s0 - (g.s - g.t)) / C::kBq * C::kBq : 0;
  const std::int64_t q_end = g.query_end(std::min(g.s, s0 + C::kBkv) - 1);
  const int per_head = q_end > q_first ? static_cast<int>((q_end - q_first + C::kBq - 1) / C::kBq) : 0;
  const int tiles = per_head * static_cast<int>(g.group);
  auto tile_start = [&](int i) { return q_first + static_cast<std::int64_t>(i % per_head) * C::kBq; };

  if (threadIdx.x == 0) {
    bars->keys.init(128, kComputingWarps, hang::site(hang::flash_dkv, kD, 0), hang_word);
    // each loading thread's copies, then its stores
    bars->queries.init(2 * 128, kComputingWarps, hang::site(hang::flash_dkv, kD, 1), hang_word);
  }
  __syncthreads();  // the barriers are set up; from here on no block-wide barrier

  if (group == kLoader) {
    mbarrier::shrink_registers<C::Registers::kLoaderRegisters>();
    const int thread = static_cast<int>(threadIdx.x) - 128 * kLoader, d = static_cast<int>(g.d);
    const int key_rows = rows_in_tile(g.s, s0, C::kBkv);
    wgmma::load_swizzled<kD, C::kBkv, 128>(thread, sk, k + b * g.k_stride[0] + kvh * g.k_stride[2] + s0 * g.k_stride[1],
                                           g.k_stride[1], key_rows, d);
    wgmma::load_swizzled<kD, C::kBkv, 128>(thread, sv, v + b * g.v_stride[0] + kvh * g.v_stride[2] + s0 * g.v_stride[1],
                                           g.v_stride[1], key_rows, d);
    bars->keys.copies_issued(0, 0);
    // Tile i is query tile j of head hh of the group, i = hh per_head + j (no division: the
    // loader's registers are few).
    const int first_head = static_cast<int>(kvh * g.group);
    for (int hh = 0, i = 0; hh < g.group; ++hh) {
      const int h = first_head + hh;
      for (int j = 0; j < per_head; ++j, ++i) {
        const std::int64_t t0 = q_first + static_cast<std::int64_t>(j) * C::kBq;
        const int rows = rows_in_tile(g.t, t0, C::kBq);
        bars->queries.wait_free(i);
        wgmma::load_swizzled<kD, C::kBq, 128>(thread, queries(i),
                                              q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1],
                                              g.q_stride[1], rows, d);
        wgmma::load_swizzled<kD, C::kBq, 128>(thread, grads(i), dout + ((b * g.t + t0) * g.hq + h) * g.d, g.hq * g.d,
                                              rows, d);
        bars->queries.copies_issued(0, i);
        float* st = tile_stats(i);
        load_stats<C::kBq, 128>(thread, st, lse + (b * g.hq + h) * g.t + t0, rows, kLog2e);
        load_stats<C::kBq, 128>(thread, st + C::kBq, delta + (b * g.hq + h) * g.t + t0, rows, 1.0f);
        bars->queries.stores_done(0, i);
      }
    }
    async::commit();
    async::wait<0>();  // no copy may still be in flight when the thread exits
    bars->queries.wait_finished();  // bounded: a computing warp that hangs ends the kernel here
    return;
  }

  mbarrier::grow_registers<C::Registers::kComputeRegisters>();
  const std::uint32_t k_tile = wgmma::shared_address(sk), v_tile = wgmma::shared_address(sv);
  const float scale_log2 = g.scale * kLog2e;
  float acc_k[C::kDo / 8][4] = {}, acc_v[C::kDo / 8][4] = {};
  // The MN-major B operand of dV += P^T dO and dK += dS^T Q: columns c0 .. c0 + kDo - 1.
  const std::uint32_t columns = c0 / 64 * C::kBq * 128;
  bars->keys.wait_landed(0, 0);
  for (int i = 0; i < tiles; ++i) {
    bars->queries.wait_landed(0, i);
    const std::int64_t t0 = tile_start(i);
    if (!g.causal || s0 + 64 * group <= t0 + C::kBq - 1 + (g.s - g.t)) {  // some key of this warpgroup is seen
      const std::uint32_t q_tile = wgmma::shared_address(queries(i)), do_tile = wgmma::shared_address(grads(i));
      const float* s_lse = tile_stats(i);
      const float* s_delta = s_lse + C::kBq;
      // Rows are this warp's 16 keys, columns the tile's queries: S^T = K Q^T, dP^T = V dO^T.
      float pt[C::kBq / 8][4], dpt[C::kBq / 8][4];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kD; kk += 16) {
        wgmma::mma_ss<C::kBq>(pt, wgmma::kmajor(k_tile, C::kBkv, 64 * group, kk), wgmma::kmajor(q_tile, C::kBq, 0, kk),
                              kk > 0);
        wgmma::mma_ss<C::kBq>(dpt, wgmma::kmajor(v_tile, C::kBkv, 64 * group, kk),
                              wgmma::kmajor(do_tile, C::kBq, 0, kk), kk > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::hold(pt);
      wgmma::hold(dpt);
      const bool unmasked = g.all_visible(t0, t0 + C::kBq, key0, key0 + 16);
      softmax_backward_step<C::kBq, true>(pt, dpt, s_lse, s_delta, 0, scale_log2, g.scale, unmasked,
                                          [&](int row, int col) { return g.visible(b, t0 + col, key0 + row); });
      // dV += P^T dO, dK += dS^T Q (k = the tile's queries).
      std::uint32_t ap[C::kBq / 16][4], ads[C::kBq / 16][4];
#pragma unroll
      for (int kk = 0; kk < C::kBq / 16; ++kk) {
        a_from_accumulators(ap[kk], pt[2 * kk], pt[2 * kk + 1]);
        a_from_accumulators(ads[kk], dpt[2 * kk], dpt[2 * kk + 1]);
      }
      wgmma::hold(acc_k);
      wgmma::hold(acc_v);
      wgmma::hold(ap);
      wgmma::hold(ads);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < C::kBq / 16; ++kk) {
        wgmma::mma_rs<C::kDo>(acc_v, ap[kk], wgmma::mnmajor(do_tile + columns, C::kBq, 16 * kk), true);
        wgmma::mma_rs<C::kDo>(acc_k, ads[kk], wgmma::mnmajor(q_tile + columns, C::kBq, 16 * kk), true);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::hold(acc_k);
      wgmma::hold(acc_v);
    }
    bars->queries.release(i);  // this warp's products reading the tile are done (or skipped)
  }
  bars->queries.finish();
  const std::int64_t at = ((b * g.s + key0) * g.hkv + kvh) * g.d + c0;
  store_gradient<C::kDo>(acc_k, dk + at, g.hkv * g.d, g.s - key0, g.d - c0);
  store_gradient<C::kDo>(acc_v, dv + at, g.hkv * g.d, g.s - key0, g.d - c0);
}

template <int kD>
void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
              const Tensor& delta, const AttnShape& g, Tensor& dq, Tensor& dk, Tensor& dv) {
  using Q = Sm90Dq<kD>;
  using K = Sm90Dkv<kD>;
  std::uint64_t* const hang_word = hang::word(q.device().index);
  allow_dynamic_shared(dq_sm90_kernel<kD>, Q::kSmem);
  allow_dynamic_shared(dkv_sm90_kernel<kD>, K::kSmem);
  const dim3 grid_q(static_cast<unsigned>((g.t + Q::kBq - 1) / Q::kBq), static_cast<unsigned>(g.hq),
                    static_cast<unsigned>(g.batch));
  launch(dq_sm90_kernel<kD>, {grid_q, kThreads, Q::kSmem}, q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
         dout.data<bf16>(), lse.data<float>(), delta.data<float>(), g, dq.data<bf16>(), hang_word);
  const dim3 grid_k(static_cast<unsigned>((g.s + K::kBkv - 1) / K::kBkv * K::kPasses), static_cast<unsigned>(g.hkv),
                    static_cast<unsigned>(g.batch));
  launch(dkv_sm90_kernel<kD>, {grid_k, kThreads, K::kSmem}, q.data<bf16>(), k.data<bf16>(), v.data<bf16>(),
         dout.data<bf16>(), lse.data<float>(), delta.data<float>(), g, dk.data<bf16>(), dv.data<bf16>(), hang_word);
}

template <int kD>
std::vector<KernelRegisters> registers() {
  cudaFuncAttributes dq{}, dkv{};
  DARK_CUDA_CHECK(cudaFuncGetAttributes(&dq, dq_sm90_kernel<kD>));
  DARK_CUDA_CHECK(cudaFuncGetAttributes(&dkv, dkv_sm90_kernel<kD>));
  return {{str("dq_sm90_kernel<", kD, ">"), dq.numRegs, Sm90Dq<kD>::Registers::kEntryNeeded},
          {str("dkv_sm90_kernel<", kD, ">"), dkv.numRegs, Sm90Dkv<kD>::Registers::kEntryNeeded}};
}

}  // namespace

std::vector<KernelRegisters> backward_sm90_registers(int kd) {
  switch (kd) {
    case 64: return registers<64>();
    case 128: return registers<128>();
    case 256: return registers<256>();
    default: throw Error(str("flash_attention: the sm_90 kernels have no head dimension ", kd));
  }
}

void backward_sm90(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                   const Tensor& delta, const AttnShape& g, int kd, Tensor& dq, Tensor& dk, Tensor& dv) {
  switch (kd) {
    case 64: return backward<64>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    case 128: return backward<128>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    case 256: return backward<256>(q, k, v, dout, lse, delta, g, dq, dk, dv);
    default: throw Error(str("flash_attention: the sm_90 kernels have no head dimension ", kd));
  }
}

}  // namespace dark::cuda::flash
