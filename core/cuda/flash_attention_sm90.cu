// Flash attention's bf16 forward for Hopper (sm_90a): the products on wgmma, the warpgroup
// instructions that read their operands straight from shared memory, in place of the
// mma.sync kernel of flash_attention_bf16.cu, whose ldmatrix traffic and register operands
// leave an H100 / H200 at a fraction of its tensor-core rate. Same contract, same online
// softmax and the same output bits per element up to the products' summation order.
//   - Warp-specialised: a block is kWarpGroups warpgroups that compute, of 64 query rows each
//     (one wgmma M; two, one at d 256), and one warpgroup that loads. The loading warpgroup
//     copies Q once and the key tiles (128 keys, 64 at d 256) with cp.async into the 128-byte
//     swizzle of wgmma.cuh, kStages tiles of K and V in shared memory at once, and hands them
//     over through mbarriers (mbarrier.cuh): per buffer "K landed", "V landed" and "free"
//     (every computing warp done with it). It keeps 40 registers (setmaxnreg) so that each
//     computing thread can hold 232 (tile_pipeline.cuh). No block-wide barrier after the
//     start: each computing warpgroup runs at its own pace, so one's softmax overlaps the
//     other's products as the warp schedulers find them, and the loads are never in a
//     computing thread's way.
//   - Per key tile: S = Q K^T as kD / 16 products m64nBk16 with both operands in shared memory
//     (K-major), the online softmax on the accumulators (flash_tiles.cuh), and O += P V as
//     kBc / 16 products m64nDk16 with P in registers (an accumulator is, lane for lane, half
//     of the next A fragment) and V in shared memory (MN-major). Within a warpgroup the
//     softmax of tile i runs while P V of tile i - 1 is still on the tensor cores (see the
//     kernel).
// What FlashAttention-3 adds and this kernel does not (yet): TMA loads (one thread issues a
// tile; here the loading warpgroup issues 16-byte copies) and the explicit ping-pong of softmax
// and products between warpgroups (named barriers). The backward: flash_attention_sm90_backward.cu.
// Used for head dimensions 64, 128 and 256 with 16-byte-aligned rows on compute capability
// 9.0 (flash_attention.cu picks it); the emulator runs it too (its wgmma follows the PTX ISA,
// products completing at the wait; its mbarriers block a thread until the phase completes).
#include <cstdint>

#include "core/cuda/async_copy.cuh"
#include "core/cuda/flash_attention.cuh"
#include "core/cuda/flash_tiles.cuh"
#include "core/cuda/tile_pipeline.cuh"
#include "core/cuda/wgmma.cuh"

namespace dark::cuda::flash {
namespace {

using bf16 = BFloat16;

template <int kD>
struct Sm90Fwd {
  static constexpr int kWarpGroups = kD <= 128 ? 2 : 1;  // computing; d 256: three stages leave room for one
  static constexpr int kThreads = 128 * (kWarpGroups + 1);  // and the loading warpgroup, the last
  static constexpr int kBr = 64 * kWarpGroups;       // queries per block
  static constexpr int kBc = kD <= 128 ? 128 : 64;  // keys per tile: the N of S = Q K^T (registers at d 256)
  static constexpr int kStages = 3;                 // key tiles in shared memory at once
  static constexpr std::uint32_t kQBytes = kBr * kD * sizeof(bf16);
  static constexpr std::uint32_t kKVBytes = kBc * kD * sizeof(bf16);  // one K or V tile
  // Registers move to the computing warpgroups in blocks of 384 threads (tile_pipeline.cuh);
  // at d 256 (256 threads) every thread starts with 255 and nothing moves.
  static constexpr bool kReallocate = kWarpGroups == 2;
  using Registers = pipeline::RoomyLoader;
  // Q once; the key tiles in two parts, K and V.
  struct Barriers {
    pipeline::TilePipeline<1> queries;
    pipeline::TilePipeline<kStages, 2> keys;
  };
  // 1024 bytes of slack to align the tiles to the swizzle's 1024-byte pattern; the barriers
  // after the tiles.
  static constexpr std::size_t kSmem = 1024 + kQBytes + 2 * kStages * kKVBytes + sizeof(Barriers);
  static_assert(kSmem <= 227 * 1024, "more shared memory than a block of an H100 / H200 may have");
};

// grid (ceil(T / kBr), Hq, B), block kThreads.
//
// The computing warpgroups' pipeline, per key tile i: issue S_i = Q K_i, then O += P_(i-1)
// V_(i-1) (the previous tile's probabilities, kept in registers); wait for S_i only and run
// its softmax while the P V product is still on the tensor cores; wait for that (the product
// reads O and P's registers until then), free tile i - 1's buffer, rescale O by tile i's
// correction, and keep P_i for the next round. The loader fills a buffer again once every
// computing warp has freed it: tile i + kStages - 1 may load while tiles i - 1 and i are read.
template <int kD>
__global__ void __launch_bounds__(Sm90Fwd<kD>::kThreads, 1)
    forward_sm90_kernel(const bf16* q, const bf16* k, const bf16* v, AttnShape g, bf16* out, float* lse,
                        std::uint64_t* hang_word) {
  using C = Sm90Fwd<kD>;
  DARK_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* const sq = raw + (1024 - wgmma::shared_address(raw) % 1024) % 1024;
  unsigned char* const skv = sq + C::kQBytes;  // buffer i % kStages: K at skv + 2 (i % kStages) kKVBytes, V after it
  auto* const bars = reinterpret_cast<typename C::Barriers*>(skv + 2 * C::kStages * C::kKVBytes);
  auto keys = [&](int i) { return skv + 2 * (i % C::kStages) * C::kKVBytes; };
  auto values = [&](int i) { return keys(i) + C::kKVBytes; };

  const int group = static_cast<int>(threadIdx.x) / 128, warp = static_cast<int>(threadIdx.x) / 32 % 4;
  const std::int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * C::kBr;
  const std::int64_t begin = g.first_key_tile(t0, C::kBc), end = g.key_end(t0, C::kBr);
  const int tiles = end > begin ? static_cast<int>((end - begin + C::kBc - 1) / C::kBc) : 0;
  auto tile_start = [&](int i) { return begin + static_cast<std::int64_t>(i) * C::kBc; };
  constexpr int kKeys = 0, kValues = 1;  // the parts of a key tile

  if (threadIdx.x == 0) {
    // each loading thread's copies arrive
    bars->queries.init(128, 4 * C::kWarpGroups, hang::site(hang::flash_forward, kD, 0), hang_word);
    bars->keys.init(128, 4 * C::kWarpGroups, hang::site(hang::flash_forward, kD, 1), hang_word);
  }
  __syncthreads();  // the barriers are set up; from here on no block-wide barrier

  if (group == C::kWarpGroups) {  // the loader
    if constexpr (C::kReallocate) mbarrier::shrink_registers<C::Registers::kLoaderRegisters>();
    const int thread = static_cast<int>(threadIdx.x) - 128 * C::kWarpGroups, d = static_cast<int>(g.d);
    const bf16* kh = k + b * g.k_stride[0] + kvh * g.k_stride[2];
    const bf16* vh = v + b * g.v_stride[0] + kvh * g.v_stride[2];
    wgmma::load_swizzled<kD, C::kBr, 128>(thread, sq, q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1],
                                          g.q_stride[1], rows_in_tile(g.t, t0, C::kBr), d);
    bars->queries.copies_issued(0, 0);
    for (int i = 0; i < tiles; ++i) {
      const std::int64_t s0 = tile_start(i);
      const int rows = rows_in_tile(g.s, s0, C::kBc);
      bars->keys.wait_free(i);
      wgmma::load_swizzled<kD, C::kBc, 128>(thread, keys(i), kh + s0 * g.k_stride[1], g.k_stride[1], rows, d);
      bars->keys.copies_issued(kKeys, i);
      wgmma::load_swizzled<kD, C::kBc, 128>(thread, values(i), vh + s0 * g.v_stride[1], g.v_stride[1], rows, d);
      bars->keys.copies_issued(kValues, i);
    }
    async::commit();
    async::wait<0>();  // no copy may still be in flight when the thread exits
    bars->keys.wait_finished();  // bounded: a computing warp that hangs ends the kernel here
    return;
  }

  if constexpr (C::kReallocate) mbarrier::grow_registers<C::Registers::kComputeRegisters>();
  const std::uint32_t q_tile = wgmma::shared_address(sq);
  auto k_tile = [&](int i) { return wgmma::shared_address(keys(i)); };
  auto v_tile = [&](int i) { return wgmma::shared_address(values(i)); };
  const float scale_log2 = g.scale * kLog2e;
  const std::int64_t row0 = t0 + 64 * group + 16 * warp;  // the warp's first query
  float o[kD / 8][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  std::uint32_t p[C::kBc / 16][4];  // P of the tile whose P V is next

  // Each step issues its products and commits them as one group (not waited for).
  auto issue_s = [&](float(&sc)[C::kBc / 8][4], int i) {  // S = Q K_i
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD; kk += 16)
      wgmma::mma_ss<C::kBc>(sc, wgmma::kmajor(q_tile, C::kBr, 64 * group, kk), wgmma::kmajor(k_tile(i), C::kBc, 0, kk),
                            kk > 0);
    wgmma::commit();
  };
  auto issue_pv = [&](int i) {  // O += P V_i
    wgmma::hold(o);
    wgmma::hold(p);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < C::kBc / 16; ++kk)
      wgmma::mma_rs<kD>(o, p[kk], wgmma::mnmajor(v_tile(i), C::kBc, 16 * kk), true);
    wgmma::commit();
  };
  auto softmax = [&](float(&sc)[C::kBc / 8][4], int i, float(&correction)[2]) {  // S_i (done) -> P_i in sc
    wgmma::hold(sc);
    const std::int64_t s0 = tile_start(i);
    const bool unmasked = g.all_visible(row0, row0 + 16, s0, s0 + C::kBc);
    online_softmax_step<C::kBc>(sc, m, l, correction, scale_log2, unmasked,
                                [&](int row, int col) { return g.visible(b, row0 + row, s0 + col); });
  };

  bars->queries.wait_landed(0, 0);
  if (tiles > 0) {
    float sc[C::kBc / 8][4], correction[2];
    bars->keys.wait_landed(kKeys, 0);
    issue_s(sc, 0);
    wgmma::wait<0>();
    softmax(sc, 0, correction);  // o is 0: nothing to rescale
#pragma unroll
    for (int kk = 0; kk < C::kBc / 16; ++kk) a_from_accumulators(p[kk], sc[2 * kk], sc[2 * kk + 1]);
  }
  for (int i = 1; i < tiles; ++i) {
    float sc[C::kBc / 8][4], correction[2];
    bars->keys.wait_landed(kKeys, i);
    issue_s(sc, i);
    bars->keys.wait_landed(kValues, i - 1);
    issue_pv(i - 1);
    wgmma::wait<1>();  // S_i is done; P V of tile i - 1 may still run
    softmax(sc, i, correction);
    wgmma::wait<0>();  // P V of tile i - 1 is done: o and p are free, and so is its buffer
    bars->keys.release(i - 1);
    wgmma::hold(o);
    wgmma::hold(p);
    rescale(o, correction);
#pragma unroll
    for (int kk = 0; kk < C::kBc / 16; ++kk) a_from_accumulators(p[kk], sc[2 * kk], sc[2 * kk + 1]);
  }
  if (tiles > 0) {
    bars->keys.wait_landed(kValues, tiles - 1);
    issue_pv(tiles - 1);
    wgmma::wait<0>();
    wgmma::hold(o);
  }
  bars->keys.finish();
  store_rows(o, m, l, g, b, h, row0, out, lse);
}

template <int kD>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, Tensor& out, Tensor& lse) {
  using C = Sm90Fwd<kD>;
  allow_dynamic_shared(forward_sm90_kernel<kD>, C::kSmem);
  const dim3 grid(static_cast<unsigned>((g.t + C::kBr - 1) / C::kBr), static_cast<unsigned>(g.hq),
                  static_cast<unsigned>(g.batch));
  launch(forward_sm90_kernel<kD>, {grid, C::kThreads, C::kSmem}, q.data<bf16>(), k.data<bf16>(), v.data<bf16>(), g,
         out.data<bf16>(), lse.data<float>(), hang::word(q.device().index));
}

template <int kD>
std::vector<KernelRegisters> registers() {
  using C = Sm90Fwd<kD>;
  cudaFuncAttributes attributes{};
  DARK_CUDA_CHECK(cudaFuncGetAttributes(&attributes, forward_sm90_kernel<kD>));
  return {{str("forward_sm90_kernel<", kD, ">"), attributes.numRegs, C::kReallocate ? C::Registers::kEntryNeeded : 0}};
}

}  // namespace

std::vector<KernelRegisters> forward_sm90_registers(int kd) {
  switch (kd) {
    case 64: return registers<64>();
    case 128: return registers<128>();
    case 256: return registers<256>();
    default: throw Error(str("flash_attention: the sm_90 kernels have no head dimension ", kd));
  }
}

bool sm90_built() {
#if defined(DARK_CUDA_EMULATOR) || defined(DARK_WITH_SM90A)
  return true;
#else
  return false;
#endif
}

void forward_sm90(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, int kd, Tensor& out,
                  Tensor& lse) {
  switch (kd) {
    case 64: return forward<64>(q, k, v, g, out, lse);
    case 128: return forward<128>(q, k, v, g, out, lse);
    case 256: return forward<256>(q, k, v, g, out, lse);
    default: throw Error(str("flash_attention: the sm_90 kernels have no head dimension ", kd));
  }
}

}  // namespace dark::cuda::flash
