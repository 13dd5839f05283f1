// Flash attention's bf16 forward for Hopper (sm_90a): the products on wgmma, the warpgroup
// instructions that read their operands straight from shared memory, in place of the
// mma.sync kernel of flash_attention_bf16.cu, whose ldmatrix traffic and register operands
// leave an H100 / H200 at a fraction of its tensor-core rate. Same contract, same online
// softmax and the same output bits per element up to the products' summation order.
//   - A block is kWarpGroups warpgroups of 64 query rows each (one wgmma M). Per key tile:
//     S = Q K^T as kD / 16 products m64n128k16 with both operands in shared memory (K-major),
//     the online softmax on the accumulators (flash_tiles.cuh), then O += P V as kBc / 16
//     products m64nDk16 with P in registers (an accumulator is, lane for lane, half of the
//     next A fragment) and V in shared memory (MN-major).
//   - Tiles are stored with the 128-byte swizzle (wgmma.cuh) and loaded with cp.async into
//     two buffers: the next key tile lands while this one is multiplied; the two warpgroups
//     of a block (the one block an SM holds: 220-244 registers a thread) overlap one's
//     softmax with the other's products as the warp schedulers find them.
//   - A warpgroup skips the products of a key tile none of its rows sees (causal).
// What FlashAttention-3 adds and this kernel does not (yet): TMA loads by a producer warp
// with register reallocation, and the explicit ping-pong of softmax and products between
// warpgroups. The backward: flash_attention_sm90_backward.cu.
// Used for head dimensions 64 and 128 with 16-byte-aligned rows on compute capability 9.0
// (flash_attention.cu picks it); the emulator runs it too (its wgmma follows the PTX ISA).
#include <cstdint>

#include "core/cuda/async_copy.cuh"
#include "core/cuda/flash_attention.cuh"
#include "core/cuda/flash_tiles.cuh"
#include "core/cuda/wgmma.cuh"

namespace dark::cuda::flash {
namespace {

using bf16 = BFloat16;

template <int kD>
struct Sm90Fwd {
  static constexpr int kWarpGroups = 2;
  static constexpr int kThreads = 128 * kWarpGroups;
  static constexpr int kBr = 64 * kWarpGroups;  // queries per block
  static constexpr int kBc = 128;               // keys per tile: the N of S = Q K^T
  static constexpr std::uint32_t kQBytes = kBr * kD * sizeof(bf16);
  static constexpr std::uint32_t kKVBytes = kBc * kD * sizeof(bf16);  // one K or V tile
  // 1024 bytes of slack to align the tiles to the swizzle's 1024-byte pattern.
  static constexpr std::size_t kSmem = 1024 + kQBytes + 4 * kKVBytes;
};

// grid (ceil(T / kBr), Hq, B), block kThreads.
template <int kD>
__global__ void __launch_bounds__(Sm90Fwd<kD>::kThreads, 1)
    forward_sm90_kernel(const bf16* q, const bf16* k, const bf16* v, AttnShape g, bf16* out, float* lse) {
  using C = Sm90Fwd<kD>;
  DARK_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* const sq = raw + (1024 - wgmma::shared_address(raw) % 1024) % 1024;
  unsigned char* const skv = sq + C::kQBytes;  // buffer i: K at skv + 2 i kKVBytes, V after it
  auto keys = [&](int i) { return skv + 2 * (i & 1) * C::kKVBytes; };
  auto values = [&](int i) { return keys(i) + C::kKVBytes; };

  const int group = static_cast<int>(threadIdx.x) / 128, warp = static_cast<int>(threadIdx.x) / 32 % 4;
  const std::int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * C::kBr;
  const std::int64_t group_t0 = t0 + 64 * group;  // the warpgroup's first query
  const bf16* kh = k + b * g.k_stride[0] + kvh * g.k_stride[2];
  const bf16* vh = v + b * g.v_stride[0] + kvh * g.v_stride[2];
  const std::int64_t begin = g.first_key_tile(t0, C::kBc), end = g.key_end(t0, C::kBr);
  const int tiles = end > begin ? static_cast<int>((end - begin + C::kBc - 1) / C::kBc) : 0;
  auto load_keys = [&](int i) {
    const std::int64_t s0 = begin + static_cast<std::int64_t>(i) * C::kBc;
    wgmma::load_swizzled<kD, C::kBc, C::kThreads>(keys(i), kh + s0 * g.k_stride[1], g.k_stride[1], g.s - s0, g.d);
    wgmma::load_swizzled<kD, C::kBc, C::kThreads>(values(i), vh + s0 * g.v_stride[1], g.v_stride[1], g.s - s0, g.d);
  };
  wgmma::load_swizzled<kD, C::kBr, C::kThreads>(sq, q + b * g.q_stride[0] + h * g.q_stride[2] + t0 * g.q_stride[1],
                                                g.q_stride[1], g.t - t0, g.d);
  if (tiles > 0) load_keys(0);
  async::commit();

  const std::uint32_t q_tile = wgmma::shared_address(sq);
  auto k_tile = [&](int i) { return wgmma::shared_address(keys(i)); };
  auto v_tile = [&](int i) { return wgmma::shared_address(values(i)); };

  const float scale_log2 = g.scale * kLog2e;
  const std::int64_t row0 = group_t0 + 16 * warp;  // the warp's first query
  float o[kD / 8][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  for (int i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) load_keys(i + 1);
    async::commit();
    async::wait<1>();  // tile i (and the queries) have landed
    wgmma::fence_shared_writes();
    __syncthreads();
    const std::int64_t s0 = begin + static_cast<std::int64_t>(i) * C::kBc;
    const bool seen = !g.causal || s0 <= group_t0 + 63 + (g.s - g.t);  // by some row of this warpgroup
    if (seen) {
      float sc[C::kBc / 8][4];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kD; kk += 16)
        wgmma::mma_ss<C::kBc>(sc, wgmma::kmajor(q_tile, C::kBr, 64 * group, kk),
                              wgmma::kmajor(k_tile(i), C::kBc, 0, kk), kk > 0);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::hold(sc);
      const bool unmasked = g.all_visible(row0, row0 + 16, s0, s0 + C::kBc);
      online_softmax_step<C::kBc>(sc, m, l, o, scale_log2, unmasked,
                                  [&](int row, int col) { return g.visible(b, row0 + row, s0 + col); });
      std::uint32_t p[C::kBc / 16][4];
#pragma unroll
      for (int kk = 0; kk < C::kBc / 16; ++kk) a_from_accumulators(p[kk], sc[2 * kk], sc[2 * kk + 1]);
      wgmma::hold(o);  // rescaled above
      wgmma::hold(p);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < C::kBc / 16; ++kk)
        wgmma::mma_rs<kD>(o, p[kk], wgmma::mnmajor(v_tile(i), C::kBc, 16 * kk), true);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::hold(o);
    }
    __syncthreads();  // every warpgroup is done with buffer i & 1 before tile i + 2 loads into it
  }
  async::wait<0>();  // no copy may still be in flight when the block exits
  store_rows(o, m, l, g, b, h, row0, out, lse);
}

template <int kD>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, Tensor& out, Tensor& lse) {
  using C = Sm90Fwd<kD>;
  allow_dynamic_shared(forward_sm90_kernel<kD>, C::kSmem);
  const dim3 grid(static_cast<unsigned>((g.t + C::kBr - 1) / C::kBr), static_cast<unsigned>(g.hq),
                  static_cast<unsigned>(g.batch));
  launch(forward_sm90_kernel<kD>, {grid, C::kThreads, C::kSmem}, q.data<bf16>(), k.data<bf16>(), v.data<bf16>(), g,
         out.data<bf16>(), lse.data<float>());
}

}  // namespace

bool sm90_built() {
#if defined(DARK_CUDA_EMULATOR) || defined(DARK_WITH_SM90A)
  return true;
#else
  return false;
#endif
}

void forward_sm90(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, int kd, Tensor& out,
                  Tensor& lse) {
  DARK_CHECK(kd == 64 || kd == 128, "flash_attention: the sm_90 kernel has no head dimension ", kd);
  if (kd == 64) return forward<64>(q, k, v, g, out, lse);
  return forward<128>(q, k, v, g, out, lse);
}

}  // namespace dark::cuda::flash
