// Linear attention of the random-feature kinds on CUDA, for f32 and bf16 inputs (f32
// accumulation throughout): linear_attention on given feature logits, and the fused
// random_feature_attention, whose logits omega x - |x|^2 / 2 - ln(m) / 2 (+ log weight) are
// computed inside the kernels chunk by chunk and never stored for the sequence. Same
// contract as the CPU kernel (core/cpu/linear_attention.cpp, whose notation this follows):
// causal key offsets are the running max over real positions <= t, nothing after t enters
// row t's arithmetic (masked terms are exact zeros), padded keys are inert, rows that see no
// real key give 0, and every sum has a fixed order: the same inputs give the same bits.
//
// Parallel over (batch, kv head, segment): the sequence is cut into G segments of whole
// chunks (G depends only on the shape and the GPU's multiprocessor count), and
//   1. offsets: o_j, a per-row max then a prefix max per (b, kv) (causal; else one max);
//   2. segment states: S_s = sum over the segment's real keys of exp(k_j - o_end)^T [v_j, 1],
//      held at o_end, the offset of the segment's last position, one block per segment;
//   3. a scan over segments turns them into each segment's incoming state (all earlier keys,
//      held at the offset before the segment), rescaling by exp(o_before - o_after) <= 1;
//   4. one block per segment then runs the CPU kernel's chunk recurrence from that state:
//      intra-chunk P = Phi E^T masked by the decay exp(o_j - o_t), Y = P Vx + Phi S, fold;
//      log_norm_t (when wanted) = qoff_t + o_t + log(den'_t), qoff_t the query's max logit.
// The backward recomputes 1-3, runs the forward sweep for dq (dPhi = (G Vx^T o D) E + G S^T),
// builds reverse states R (queries after each segment, held at the offset of the segment's
// first position) by the mirror-image scan, and runs the reverse sweep for dk, dv. In the
// fused op, dlogits become dx = dl omega - x rowsum(dl) per chunk, and domega = sum dl^T x is
// accumulated per block in a private slice of a scratch buffer, then summed over blocks in
// block order. Non-causal calls use the same passes with one constant offset and the total
// state in place of the incoming one. log_norm's gradient, when given, adds dlog_norm_t / den'_t
// to G's last column (load_grads), so every pass above carries it unchanged.
//
// Every chunk loader starts with a block barrier, so no thread overwrites what a slower one
// still reads. Shared memory holds a chunk's matrices (f32); the running state lives in the
// block's slice of a global scratch buffer (L2-resident). Every product, the logits x omega^T
// included, is a block product of tile::block_mma (block_mma.cuh): for bf16 inputs on the
// tensor cores (mma.sync, operands rounded to bf16 as they are loaded, f32 accumulation; the
// products of G, whose terms cancel, with two bf16 per operand), for f32 inputs in f32 on the
// CUDA cores. The chunk length is the requested one rounded down to 64, 32, 16 or 8, or less
// when m and Dv are large; results match the CPU to rounding, not bit for bit.
// The shape, the given-logits source, the key-max pass and the chunk loaders are in
// linear_attention_chunks.cuh, shared with the sliding-window kernels.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cuda/bf16_reference_check.h"
#include "core/cuda/linear_attention_chunks.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

__device__ void block_scale(float* x, std::int64_t n, float f) {
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] *= f;
}

// ---------------------------------------------------------------- computed logits
// (the other source, GivenLogits, is in linear_attention_chunks.cuh)

// Computed logits: xq (B, T, Hq, r), xk (B, T, Hkv, r), omega (Hkv, m, r), log_weight (Hkv, m).
template <class T>
struct FeatureLogits {
  const T* xq;
  const T* xk;
  const T* omega;
  const T* log_weight;  // nullptr: none

  // x rows [row0, row0 + n) of `x` (heads per position `heads`, head `h`) into xs (n x r),
  // |x|^2 / 2 + ln(m) / 2 into half_norm (n), then the logits into out (n x m).
  __device__ void rows(const LaShape& g, const T* x, std::int64_t heads, std::int64_t b, std::int64_t h,
                       std::int64_t kvh, std::int64_t row0, std::int64_t n, float* out, float* xs,
                       float* half_norm) const {
    for (int idx = threadIdx.x; idx < n * g.r; idx += blockDim.x) {
      const int r = idx / g.r, c = idx % g.r;
      xs[idx] = static_cast<float>(x[((b * g.len + row0 + r) * heads + h) * g.r + c]);
    }
    __syncthreads();
    for (int r = threadIdx.x; r < n; r += blockDim.x) {
      float ss = 0.0f;
      for (std::int64_t c = 0; c < g.r; ++c) ss += xs[r * g.r + c] * xs[r * g.r + c];
      half_norm[r] = 0.5f * ss + g.log_m_half;
    }
    __syncthreads();
    const T* om = omega + kvh * g.m * g.r;
    const T* lw = log_weight ? log_weight + kvh * g.m : nullptr;
    // logits = xs omega^T (n x r by r x m) - half_norm + log weight
    tile::block_mma_each<T>(static_cast<int>(n), g.m, g.r, mat(xs, g.r, 1), mat(om, 1, g.r), [&](int row, int f, float v) {
      out[row * g.lm + f] = v - half_norm[row] + (lw ? static_cast<float>(lw[f]) : 0.0f);
    });
  }
  __device__ void keys(const LaShape& g, std::int64_t b, std::int64_t kvh, std::int64_t row0, std::int64_t n, float* out,
                       float* xs, float* half_norm) const {
    rows(g, xk, g.hkv, b, kvh, kvh, row0, n, out, xs, half_norm);
  }
  __device__ void queries(const LaShape& g, std::int64_t b, std::int64_t h, std::int64_t row0, std::int64_t n, float* out,
                          float* xs, float* half_norm) const {
    rows(g, xq, g.hq, b, h, h / g.group, row0, n, out, xs, half_norm);
  }
};

// ---------------------------------------------------------------- offsets

// In place: each (b, kv) row of rowmax becomes its running max (causal) or its max
// everywhere. One warp per (b, kv); max is exact, so the order does not matter.
__global__ void la_offsets_kernel(float* o, std::int64_t rows, std::int64_t len, bool causal) {
  const int lane = threadIdx.x & 31;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float* x = o + row * len;
    float carry = kNegInf;
    for (std::int64_t base = 0; base < len; base += 32) {
      const std::int64_t j = base + lane;
      float v = j < len ? x[j] : kNegInf;
      if (causal) {
#pragma unroll
        for (int delta = 1; delta < 32; delta <<= 1) {
          const float up = __shfl_up_sync(0xffffffffu, v, delta);
          if (lane >= delta) v = fmaxf(v, up);
        }
        v = fmaxf(v, carry);
        if (j < len) x[j] = v;
        carry = __shfl_sync(0xffffffffu, v, 31);
      } else {
#pragma unroll
        for (int delta = 16; delta > 0; delta >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, delta));
        carry = fmaxf(carry, v);
      }
    }
    if (!causal)
      for (std::int64_t j = lane; j < len; j += 32) x[j] = carry;
  }
}

// ---------------------------------------------------------------- chunk pieces

// The causal intra-chunk weights D[r][c] = exp(o_c - o_r) for real keys c <= r, else 0.
__device__ void build_decay(int n, int ld, const ChunkSmem& s) {
  for (int idx = threadIdx.x; idx < n * n; idx += blockDim.x) {
    const int r = idx / n, c = idx % n;
    s.dec[r * ld + c] = (c <= r && s.is_real[c]) ? expf(s.oc[c] - s.oc[r]) : 0.0f;
  }
}

// The fused op's logit gradient dl (n x m, in `dl`) of rows whose x sits in s.xs: writes
// dx = dl omega - x rowsum(dl) and adds dl^T x to domega_part (m x r, this block's own slice).
template <class T>
__device__ void logits_backward(const LaShape& g, const FeatureLogits<T>& src, const float* dl, std::int64_t n,
                                std::int64_t kvh, T* dx_rows, std::int64_t dx_row_stride, float* domega_part,
                                const ChunkSmem& s) {
  const T* om = src.omega + kvh * g.m * g.r;
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    float sum = 0.0f;
    for (std::int64_t f = 0; f < g.m; ++f) sum += dl[r * g.lm + f];
    s.half_norm[r] = sum;  // reused: rowsum(dl)
  }
  __syncthreads();
  tile::block_mma_each<T>(static_cast<int>(n), g.r, g.m, mat(dl, g.lm, 1), mat(om, g.r, 1), [&](int row, int c, float v) {
    dx_rows[row * dx_row_stride + c] = T(v - s.xs[row * g.r + c] * s.half_norm[row]);
  });
  if (domega_part) tile::block_mma<T, true>(domega_part, g.r, g.m, g.r, n, mat(dl, 1, g.lm), mat(s.xs, g.r, 1));
  __syncthreads();
}

// Folds the loaded chunk (keys in s.e, s.vx; n rows) into the causal state st, which moves to
// the chunk's last offset (rescaled by exp(at - o_new) <= 1); before the first real key the
// state stays empty. Scales s.e in place.
template <class T>
__device__ void fold_chunk(const LaShape& g, std::int64_t n, const ChunkSmem& s, float* st, float& at, bool& held) {
  const float o_new = s.oc[n - 1];
  if (o_new == kNegInf) return;
  if (held) block_scale(st, g.m * g.w, expf(at - o_new));
  for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) {
    const int r = idx / g.m;
    if (s.is_real[r]) s.e[g.at_m(idx)] *= expf(s.oc[r] - o_new);
  }
  __syncthreads();
  tile::block_mma<T, true>(st, g.w, g.m, g.w, n, mat(s.e, 1, g.lm), mat(s.vx, g.lw, 1));
  __syncthreads();
  at = o_new;
  held = true;
}

// ---------------------------------------------------------------- passes 2 and 3: states

// Segment s's own state, held at o_end (its last offset): sum over real keys of
// exp(k - o_end)^T Vx. states: (B Hkv, G, m, W).
template <class T, class Src>
__global__ void __launch_bounds__(kLaThreads, 1) la_segment_state_kernel(Src src, const T* v, const float* o, LaShape g,
                                                                      float* states) {
  DARK_DYNAMIC_SHARED(float, smem);
  const ChunkSmem s = ChunkSmem::carve(smem, g.chunk, g.m, g.w, g.r);
  const std::int64_t seg = blockIdx.x, bkv = blockIdx.y, b = bkv / g.hkv, kvh = bkv % g.hkv;
  float* st = states + (bkv * g.segments + seg) * g.m * g.w;
  block_zero(st, g.m * g.w);
  const std::int64_t j0 = g.seg_begin(seg), j1 = g.seg_end(seg);
  const float o_end = o[bkv * g.len + j1 - 1];
  if (o_end == kNegInf) return;  // no real key up to here: the state is empty
  __syncthreads();
  for (std::int64_t c0 = j0; c0 < j1; c0 += g.chunk) {
    const std::int64_t n = j1 - c0 < g.chunk ? j1 - c0 : g.chunk;
    load_keys(g, src, v, o, b, kvh, c0, n, s, true, o_end);
    tile::block_mma<T, true>(st, g.w, g.m, g.w, n, mat(s.e, 1, g.lm), mat(s.vx, g.lw, 1));
    __syncthreads();
  }
}

// Turns each segment's own state into its incoming state (every earlier key, held at the
// offset before the segment; 0 when nothing real came before). Causal: a scan over segments
// rescaled by exp(o_before - o_after) <= 1; non-causal: every slot gets the total. One thread
// per (b kv, state element).
__global__ void la_segment_scan_kernel(float* states, const float* o, LaShape g) {
  const std::int64_t per = g.m * g.w, total = g.batch * g.hkv * per;
  for (std::int64_t e = global_thread(); e < total; e += grid_threads()) {
    const std::int64_t bkv = e / per, i = e % per;
    float carry = 0.0f, held_at = kNegInf;
    bool held = false;
    for (std::int64_t seg = 0; seg < g.segments; ++seg) {
      float& slot = states[(bkv * g.segments + seg) * per + i];
      const float own = slot;
      const float o_end = o[bkv * g.len + g.seg_end(seg) - 1];
      if (g.causal) slot = held ? carry : 0.0f;
      if (o_end == kNegInf) continue;
      carry = (held ? carry * expf(held_at - o_end) : 0.0f) + own;
      held = true;
      held_at = o_end;
    }
    if (!g.causal)
      for (std::int64_t seg = 0; seg < g.segments; ++seg) states[(bkv * g.segments + seg) * per + i] = carry;
  }
}

// ---------------------------------------------------------------- pass 4: the forward sweep

// The offset the segment's incoming state is held at (causal): the one before the segment.
__device__ float incoming_offset(const LaShape& g, const float* o, std::int64_t bkv, std::int64_t seg) {
  return seg == 0 ? kNegInf : o[bkv * g.len + g.seg_begin(seg) - 1];
}

template <class T, class Src>
__global__ void __launch_bounds__(kLaThreads, 1) la_forward_kernel(Src src, const T* v, const float* o, LaShape g,
                                                                float* states, T* out, T* den) {
  DARK_DYNAMIC_SHARED(float, smem);
  const ChunkSmem s = ChunkSmem::carve(smem, g.chunk, g.m, g.w, g.r);
  const std::int64_t seg = blockIdx.x, bkv = blockIdx.y, b = bkv / g.hkv, kvh = bkv % g.hkv;
  float* st = states + (bkv * g.segments + seg) * g.m * g.w;
  const std::int64_t j0 = g.seg_begin(seg), j1 = g.seg_end(seg), c = g.chunk;
  float at = g.causal ? incoming_offset(g, o, bkv, seg) : o[bkv * g.len];
  bool held = at != kNegInf;
  for (std::int64_t c0 = j0; c0 < j1; c0 += c) {
    const std::int64_t n = j1 - c0 < c ? j1 - c0 : c;
    load_keys(g, src, v, o, b, kvh, c0, n, s, false, 0.0f);
    if (g.causal) build_decay(n, g.lc, s);
    for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
      load_queries(g, src, b, h, c0, n, s);
      if (g.causal) {
        tile::block_mma<T, false>(s.p, g.lc, n, n, g.m, mat(s.phi, g.lm, 1), mat(s.e, 1, g.lm));
        apply_weights(s.p, n, n, g.lc, s);
        tile::block_mma<T, false>(s.y, g.lw, n, g.w, n, mat(s.p, g.lc, 1), mat(s.vx, g.lw, 1));
      } else {
        block_zero(s.y, n * g.lw);
      }
      __syncthreads();
      if (held) {
        tile::block_mma<T, false>(s.dvx, g.lw, n, g.w, g.m, mat(s.phi, g.lm, 1), mat<float>(st, g.w, 1));
        __syncthreads();
        for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) {
          const int r = idx / g.w;
          s.y[g.at_w(idx)] += s.dvx[g.at_w(idx)] * (g.causal ? expf(at - s.oc[r]) : 1.0f);
        }
      }
      __syncthreads();
      for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) {
        const int r = idx / g.w, j = idx % g.w;
        const float d = s.y[r * g.lw + g.dv] + g.eps;
        if (j < g.dv) {
          out[((b * g.len + c0 + r) * g.hq + h) * g.dv + j] = T(s.oc[r] == kNegInf ? 0.0f : s.y[g.at_w(idx)] / d);
        } else {
          den[(b * g.hq + h) * g.len + c0 + r] = T(d);
          if (g.log_norm) g.log_norm[(b * g.hq + h) * g.len + c0 + r] = log_normaliser(s.qoff[r], s.oc[r], d);
        }
      }
      __syncthreads();
    }
    if (g.causal) fold_chunk<T>(g, n, s, st, at, held);
  }
}

// ---------------------------------------------------------------- backward: dq

// dPhi = (G Vx^T o D) E + (G S^T) exp(o_S - o_t), then dq = Phi o dPhi (given logits) or the
// fused op's dx and domega. The state is recomputed exactly as the forward does.
template <class T, class Src, bool kFused>
__global__ void __launch_bounds__(kLaThreads, 1) la_dq_kernel(Src src, const T* v, const float* o, LaShape g, float* states,
                                                           const T* out, const T* den, const T* dout, T* dq,
                                                           float* domega_parts) {
  DARK_DYNAMIC_SHARED(float, smem);
  const ChunkSmem s = ChunkSmem::carve(smem, g.chunk, g.m, g.w, g.r);
  const std::int64_t seg = blockIdx.x, bkv = blockIdx.y, b = bkv / g.hkv, kvh = bkv % g.hkv;
  float* st = states + (bkv * g.segments + seg) * g.m * g.w;
  float* domega_part =
      domega_parts ? domega_parts + ((bkv * g.segments + seg) * 2) * g.m * g.r : nullptr;  // slot 0: the query side
  if (domega_part) block_zero(domega_part, g.m * g.r);
  const std::int64_t j0 = g.seg_begin(seg), j1 = g.seg_end(seg), c = g.chunk;
  float at = g.causal ? incoming_offset(g, o, bkv, seg) : o[bkv * g.len];
  bool held = at != kNegInf;
  __syncthreads();
  for (std::int64_t c0 = j0; c0 < j1; c0 += c) {
    const std::int64_t n = j1 - c0 < c ? j1 - c0 : c;
    load_keys(g, src, v, o, b, kvh, c0, n, s, false, 0.0f);
    if (g.causal) build_decay(n, g.lc, s);
    for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
      load_grads(g, out, den, dout, b, h, c0, n, s.oc, s);
      if (g.causal) {
        tile::block_mma<Precise<T>, false>(s.p, g.lc, n, n, g.w, mat(s.gm, g.lw, 1), mat(s.vx, 1, g.lw));
        apply_weights(s.p, n, n, g.lc, s);
        tile::block_mma<T, false>(s.dphi, g.lm, n, g.m, n, mat(s.p, g.lc, 1), mat(s.e, g.lm, 1));
      } else {
        block_zero(s.dphi, n * g.lm);
      }
      __syncthreads();
      if (held) {
        tile::block_mma<Precise<T>, false>(s.de, g.lm, n, g.m, g.w, mat(s.gm, g.lw, 1), mat<float>(st, 1, g.w));
        __syncthreads();
        for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x)
          s.dphi[g.at_m(idx)] += s.de[g.at_m(idx)] * (g.causal ? expf(at - s.oc[idx / g.m]) : 1.0f);
      }
      __syncthreads();
      load_queries(g, src, b, h, c0, n, s);
      for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) s.dphi[g.at_m(idx)] *= s.phi[g.at_m(idx)];  // dlogits
      __syncthreads();
      if constexpr (kFused) {
        logits_backward(g, src, s.dphi, n, kvh, dq + ((b * g.len + c0) * g.hq + h) * g.r, g.hq * g.r, domega_part, s);
      } else {
        for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) {
          const int r = idx / g.m, f = idx % g.m;
          dq[((b * g.len + c0 + r) * g.hq + h) * g.m + f] = T(s.dphi[g.at_m(idx)]);
        }
        __syncthreads();
      }
    }
    if (g.causal) fold_chunk<T>(g, n, s, st, at, held);
  }
}

// ---------------------------------------------------------------- backward: reverse states

// The first offset of segment s: reverse states are held there.
__device__ float segment_first_offset(const LaShape& g, const float* o, std::int64_t bkv, std::int64_t seg) {
  return o[bkv * g.len + g.seg_begin(seg)];
}

// Segment s's own reverse state R_s = sum over its query heads and rows of
// Phi_t^T G_t exp(o_first - o_t), held at o_first (0 when o_first is -inf: no earlier key is
// real, so nothing needs it). rstates: (B Hkv, G, m, W).
template <class T, class Src>
__global__ void __launch_bounds__(kLaThreads, 1) la_segment_rstate_kernel(Src src, const float* o, LaShape g, const T* out,
                                                                       const T* den, const T* dout, float* rstates) {
  DARK_DYNAMIC_SHARED(float, smem);
  const ChunkSmem s = ChunkSmem::carve(smem, g.chunk, g.m, g.w, g.r);
  const std::int64_t seg = blockIdx.x, bkv = blockIdx.y, b = bkv / g.hkv, kvh = bkv % g.hkv;
  float* rs = rstates + (bkv * g.segments + seg) * g.m * g.w;
  block_zero(rs, g.m * g.w);
  const std::int64_t j0 = g.seg_begin(seg), j1 = g.seg_end(seg);
  const float o_first = segment_first_offset(g, o, bkv, seg);
  if (o_first == kNegInf && g.causal) return;
  __syncthreads();
  for (std::int64_t c0 = j0; c0 < j1; c0 += g.chunk) {
    const std::int64_t n = j1 - c0 < g.chunk ? j1 - c0 : g.chunk;
    __syncthreads();
    for (int r = threadIdx.x; r < n; r += blockDim.x) s.oc[r] = o[bkv * g.len + c0 + r];
    __syncthreads();
    for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
      load_queries(g, src, b, h, c0, n, s);
      load_grads(g, out, den, dout, b, h, c0, n, s.oc, s);
      for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) {
        const int r = idx / g.w;
        if (g.causal && s.oc[r] != kNegInf) s.gm[g.at_w(idx)] *= expf(o_first - s.oc[r]);
      }
      __syncthreads();
      tile::block_mma<T, true>(rs, g.w, g.m, g.w, n, mat(s.phi, 1, g.lm), mat(s.gm, g.lw, 1));
      __syncthreads();
    }
  }
}

// Each slot becomes the state of every query after its segment, held at the next segment's
// first offset (causal), or the total (non-causal).
__global__ void la_segment_rscan_kernel(float* rstates, const float* o, LaShape g) {
  const std::int64_t per = g.m * g.w, total = g.batch * g.hkv * per;
  for (std::int64_t e = global_thread(); e < total; e += grid_threads()) {
    const std::int64_t bkv = e / per, i = e % per;
    float carry = 0.0f, held_at = kNegInf;
    bool held = false;
    for (std::int64_t seg = g.segments - 1; seg >= 0; --seg) {
      float& slot = rstates[(bkv * g.segments + seg) * per + i];
      const float own = slot;
      if (!g.causal) {
        carry += own;
        continue;
      }
      slot = held ? carry : 0.0f;
      const float o_first = o[bkv * g.len + g.seg_begin(seg)];
      if (o_first == kNegInf) {  // every earlier key is padded: nothing before needs a state
        held = false, carry = 0.0f;
        continue;
      }
      carry = (held ? carry * expf(o_first - held_at) : 0.0f) + own;
      held = true;
      held_at = o_first;
    }
    if (!g.causal)
      for (std::int64_t seg = 0; seg < g.segments; ++seg) rstates[(bkv * g.segments + seg) * per + i] = carry;
  }
}

// ---------------------------------------------------------------- backward: dk, dv

template <class T, class Src, bool kFused>
__global__ void __launch_bounds__(kLaThreads, 1) la_dkv_kernel(Src src, const T* v, const float* o, LaShape g,
                                                            float* rstates, const T* out, const T* den, const T* dout,
                                                            T* dk, T* dv, float* domega_parts) {
  DARK_DYNAMIC_SHARED(float, smem);
  const ChunkSmem s = ChunkSmem::carve(smem, g.chunk, g.m, g.w, g.r);
  const std::int64_t seg = blockIdx.x, bkv = blockIdx.y, b = bkv / g.hkv, kvh = bkv % g.hkv;
  float* rs = rstates + (bkv * g.segments + seg) * g.m * g.w;
  float* domega_part = domega_parts ? domega_parts + ((bkv * g.segments + seg) * 2 + 1) * g.m * g.r : nullptr;
  if (domega_part) block_zero(domega_part, g.m * g.r);
  const std::int64_t j0 = g.seg_begin(seg), j1 = g.seg_end(seg), c = g.chunk;
  float r_at = g.causal ? (seg + 1 < g.segments ? segment_first_offset(g, o, bkv, seg + 1) : kNegInf) : o[bkv * g.len];
  bool r_held = r_at != kNegInf;
  const std::int64_t last = j0 + (j1 - j0 - 1) / c * c;
  __syncthreads();
  for (std::int64_t c0 = last; c0 >= j0; c0 -= c) {
    const std::int64_t n = j1 - c0 < c ? j1 - c0 : c;
    load_keys(g, src, v, o, b, kvh, c0, n, s, false, 0.0f);
    if (g.causal) build_decay(n, g.lc, s);
    if (r_held) {  // later chunks: dE_j = e^(o_j - o_R) R Vx_j, dVx_j = e^(o_j - o_R) R^T E_j
      tile::block_mma<Precise<T>, false>(s.de, g.lm, n, g.m, g.w, mat(s.vx, g.lw, 1), mat<float>(rs, 1, g.w));
      tile::block_mma<T, false>(s.dvx, g.lw, n, g.w, g.m, mat(s.e, g.lm, 1), mat<float>(rs, g.w, 1));
      __syncthreads();
      if (g.causal) {
        for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x)
          if (s.is_real[idx / g.m]) s.de[g.at_m(idx)] *= expf(s.oc[idx / g.m] - r_at);
        for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x)
          if (s.is_real[idx / g.w]) s.dvx[g.at_w(idx)] *= expf(s.oc[idx / g.w] - r_at);
      }
    } else {
      block_zero(s.de, n * g.lm);
      block_zero(s.dvx, n * g.lw);
    }
    __syncthreads();
    // R moves to o_new = o[c0]; if that is -inf no key before c0 is real and R is not needed.
    const float o_new = s.oc[0];
    const bool fold = g.causal && o_new != kNegInf;
    if (r_held && fold) block_scale(rs, g.m * g.w, expf(o_new - r_at));
    __syncthreads();
    if (g.causal)
      for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
        load_queries(g, src, b, h, c0, n, s);
        load_grads(g, out, den, dout, b, h, c0, n, s.oc, s);
        // M = G Vx^T o D;  dE += M^T Phi;  P = Phi E^T o D;  dVx += P^T G
        tile::block_mma<Precise<T>, false>(s.p, g.lc, n, n, g.w, mat(s.gm, g.lw, 1), mat(s.vx, 1, g.lw));
        apply_weights(s.p, n, n, g.lc, s);
        tile::block_mma<T, true>(s.de, g.lm, n, g.m, n, mat(s.p, 1, g.lc), mat(s.phi, g.lm, 1));
        __syncthreads();
        tile::block_mma<T, false>(s.p, g.lc, n, n, g.m, mat(s.phi, g.lm, 1), mat(s.e, 1, g.lm));
        apply_weights(s.p, n, n, g.lc, s);
        tile::block_mma<T, true>(s.dvx, g.lw, n, g.w, n, mat(s.p, 1, g.lc), mat(s.gm, g.lw, 1));
        __syncthreads();
        if (fold) {
          for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) {
            const int r = idx / g.w;
            s.gm[g.at_w(idx)] = s.oc[r] == kNegInf ? 0.0f : s.gm[g.at_w(idx)] * expf(o_new - s.oc[r]);
          }
          __syncthreads();
          tile::block_mma<T, true>(rs, g.w, g.m, g.w, n, mat(s.phi, 1, g.lm), mat(s.gm, g.lw, 1));
          __syncthreads();
        }
      }
    // dk = E o dE, dv = dVx[:, :Dv]; the fused op's keys: dx and domega. Keys are reloaded
    // first in the fused op (its x scratch held the queries).
    for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) {
      const int r = idx / g.w, j = idx % g.w;
      if (j < g.dv) dv[((b * g.len + c0 + r) * g.hkv + kvh) * g.dv + j] = T(s.dvx[g.at_w(idx)]);
    }
    if constexpr (kFused) {
      __syncthreads();
      src.keys(g, b, kvh, c0, n, s.dphi, s.xs, s.half_norm);  // the keys' x rows again (their logits unused)
      __syncthreads();
      for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) s.de[g.at_m(idx)] *= s.e[g.at_m(idx)];
      __syncthreads();
      logits_backward(g, src, s.de, n, kvh, dk + ((b * g.len + c0) * g.hkv + kvh) * g.r, g.hkv * g.r, domega_part, s);
    } else {
      for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) {
        const int r = idx / g.m, f = idx % g.m;
        dk[((b * g.len + c0 + r) * g.hkv + kvh) * g.m + f] = T(s.e[g.at_m(idx)] * s.de[g.at_m(idx)]);
      }
    }
    __syncthreads();
    if (fold) {
      r_at = o_new;
      r_held = true;
    }
  }
}

// domega[kv] = the sum of every block's partials for kv (query and key side), in block order.
template <class T>
__global__ void la_domega_sum_kernel(const float* parts, T* domega, LaShape g) {
  const std::int64_t per = g.m * g.r, total = g.hkv * per;
  for (std::int64_t e = global_thread(); e < total; e += grid_threads()) {
    const std::int64_t kvh = e / per, i = e % per;
    float acc = 0.0f;
    for (std::int64_t b = 0; b < g.batch; ++b)
      for (std::int64_t seg = 0; seg < g.segments; ++seg)
        for (int side = 0; side < 2; ++side) acc += parts[(((b * g.hkv + kvh) * g.segments + seg) * 2 + side) * per + i];
    domega[e] = T(acc);
  }
}

// ---------------------------------------------------------------- host side

// Chunk length and segmentation for this call: the largest of 64, 32, 16, 8 that is at most the
// requested chunk (8 at least) and whose shared memory fits, and enough segments for about
// two blocks per multiprocessor.
LaShape plan(std::int64_t batch, std::int64_t len, std::int64_t hq, std::int64_t hkv, std::int64_t m, std::int64_t dv,
             std::int64_t r, bool causal, double eps, std::int64_t chunk, const Tensor& key_mask, const Device& device,
             const char* op) {
  LaShape g{};
  g.batch = batch, g.len = len, g.hq = hq, g.hkv = hkv, g.m = m, g.dv = dv, g.w = dv + 1, g.group = hq / hkv, g.r = r;
  g.causal = causal;
  g.eps = static_cast<float>(eps);
  g.log_m_half = 0.5f * std::log(static_cast<float>(m));
  g.key_mask = key_mask.defined() ? key_mask.data<std::int32_t>() : nullptr;
  int optin = 0, sms = 0;
  DARK_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device.index));
  DARK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.index));
  g.chunk = pick_chunk(chunk, optin, [&](int c) { return ChunkSmem::floats(c, m, g.w, r); });
  g.lm = padded_row(g.m), g.lw = padded_row(g.w), g.lc = padded_row(g.chunk);
  DARK_CHECK(g.chunk > 0, op, " on ", device.to_string(), ": ", m, " features with value dimension ", dv,
             " need more shared memory than the GPU has (", optin, " bytes per block)");
  const std::int64_t chunks = (len + g.chunk - 1) / g.chunk;
  const std::int64_t want = std::max<std::int64_t>(1, (2 * sms + batch * hkv - 1) / (batch * hkv));
  const std::int64_t per_segment = (chunks + std::min(want, chunks) - 1) / std::min(want, chunks);
  g.seg_len = per_segment * g.chunk;
  g.segments = (len + g.seg_len - 1) / g.seg_len;
  DARK_CHECK(g.segments <= 2147483647 && batch * hkv <= 65535, op, ": ", batch, " x ", hkv,
             " (batch x kv heads) blocks exceed the CUDA grid limit of 65535");
  return g;
}

std::size_t shared_bytes(const LaShape& g) { return ChunkSmem::floats(g.chunk, g.m, g.w, g.r) * sizeof(float); }

template <class K>
void launch_segments(K* kernel, const LaShape& g, auto&&... args) {
  const std::size_t bytes = shared_bytes(g);
  allow_dynamic_shared(kernel, bytes);
  launch(kernel, {dim3(static_cast<unsigned>(g.segments), static_cast<unsigned>(g.batch * g.hkv)), kLaThreads, bytes},
         args...);
}

// Passes 1-3: offsets o (B Hkv, T) and each segment's incoming state.
template <class T, class Src>
void offsets_and_states(const Src& src, const T* v, const LaShape& g, Tensor& o, Tensor& states) {
  launch_key_max<T>(src, g, o.data<float>());
  launch(la_offsets_kernel, {grid_for(g.batch * g.hkv, 1), 32}, o.data<float>(), g.batch * g.hkv, g.len, g.causal);
  launch_segments(la_segment_state_kernel<T, Src>, g, src, v, o.data<float>(), g, states.data<float>());
  launch(la_segment_scan_kernel, {grid_for(g.batch * g.hkv * g.m * g.w), kThreads}, states.data<float>(),
         o.data<float>(), g);
}

template <class T, class Src>
void forward_passes(const Src& src, const Tensor& v, const LaShape& g, Tensor& out, Tensor& den) {
  const Device device = v.device();
  Tensor o = Tensor::empty({g.batch * g.hkv, g.len}, DType::f32, device);
  Tensor states = Tensor::empty({g.batch * g.hkv, g.segments, g.m, g.w}, DType::f32, device);
  offsets_and_states<T>(src, v.data<T>(), g, o, states);
  launch_segments(la_forward_kernel<T, Src>, g, src, v.data<T>(), o.data<float>(), g, states.data<float>(),
                  out.data<T>(), den.data<T>());
}

template <class T, class Src, bool kFused>
void backward_passes(const Src& src, const Tensor& v, const LaShape& g, const Tensor& out, const Tensor& den,
                     const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* domega) {
  const Device device = v.device();
  Tensor o = Tensor::empty({g.batch * g.hkv, g.len}, DType::f32, device);
  Tensor states = Tensor::empty({g.batch * g.hkv, g.segments, g.m, g.w}, DType::f32, device);
  offsets_and_states<T>(src, v.data<T>(), g, o, states);
  Tensor parts;
  if (domega) parts = Tensor::empty({g.batch * g.hkv * g.segments * 2, g.m, g.r}, DType::f32, device);
  float* parts_p = domega ? parts.data<float>() : nullptr;
  launch_segments(la_dq_kernel<T, Src, kFused>, g, src, v.data<T>(), o.data<float>(), g, states.data<float>(),
                  out.data<T>(), den.data<T>(), dout.data<T>(), dq.data<T>(), parts_p);
  Tensor& rstates = states;  // reused: the forward states are done
  launch_segments(la_segment_rstate_kernel<T, Src>, g, src, o.data<float>(), g, out.data<T>(), den.data<T>(),
                  dout.data<T>(), rstates.data<float>());
  launch(la_segment_rscan_kernel, {grid_for(g.batch * g.hkv * g.m * g.w), kThreads}, rstates.data<float>(),
         o.data<float>(), g);
  launch_segments(la_dkv_kernel<T, Src, kFused>, g, src, v.data<T>(), o.data<float>(), g, rstates.data<float>(),
                  out.data<T>(), den.data<T>(), dout.data<T>(), dk.data<T>(), dv.data<T>(), parts_p);
  if (domega)
    launch(la_domega_sum_kernel<T>, {grid_for(g.hkv * g.m * g.r), kThreads}, parts.data<float>(), domega->data<T>(), g);
}

template <class T>
void linear_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, Tensor& out,
                              Tensor& den, Tensor& log_norm, bool causal, double eps, std::int64_t chunk) {
  check_dtype<T>("linear_attention_forward", {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"den", &den}});
  DeviceGuard guard(q);
  LaShape g = plan(q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[2], q.shape()[3], v.shape()[3], 0, causal, eps,
                   chunk, key_mask, q.device(), "linear_attention");
  g.log_norm = row_stat(log_norm, den, "linear_attention_forward", "log_norm");
  forward_passes<T>(GivenLogits<T>{q.data<T>(), k.data<T>()}, v, g, out, den);
}

template <class T>
void linear_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                               const Tensor& out, const Tensor& den, const Tensor& dout, const Tensor& dlog_norm,
                               Tensor& dq, Tensor& dk, Tensor& dv, bool causal, std::int64_t chunk) {
  check_dtype<T>("linear_attention_backward", {{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}, {"dq", &dq}});
  DeviceGuard guard(q);
  LaShape g = plan(q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[2], q.shape()[3], v.shape()[3], 0, causal, 0.0,
                   chunk, key_mask, q.device(), "linear_attention");
  g.dlog_norm = row_stat(dlog_norm, den, "linear_attention_backward", "dlog_norm");
  backward_passes<T, GivenLogits<T>, false>(GivenLogits<T>{q.data<T>(), k.data<T>()}, v, g, out, den, dout, dq, dk, dv,
                                            nullptr);
}

template <class T>
FeatureLogits<T> feature_source(const Tensor& xq, const Tensor& xk, const Tensor& omega, const Tensor& log_weight) {
  return {xq.data<T>(), xk.data<T>(), omega.data<T>(), log_weight.defined() ? log_weight.data<T>() : nullptr};
}

template <class T>
void random_feature_attention_forward(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                                      const Tensor& log_weight, const Tensor& key_mask, Tensor& out, Tensor& den,
                                      Tensor& log_norm, bool causal, double eps, std::int64_t chunk) {
  check_dtype<T>("random_feature_attention_forward", {{"xq", &xq}, {"xk", &xk}, {"v", &v}, {"omega", &omega}, {"out", &out}});
  DeviceGuard guard(xq);
  LaShape g = plan(xq.shape()[0], xq.shape()[1], xq.shape()[2], xk.shape()[2], omega.shape()[1], v.shape()[3],
                   xq.shape()[3], causal, eps, chunk, key_mask, xq.device(), "random_feature_attention");
  g.log_norm = row_stat(log_norm, den, "random_feature_attention_forward", "log_norm");
  forward_passes<T>(feature_source<T>(xq, xk, omega, log_weight), v, g, out, den);
}

template <class T>
void random_feature_attention_backward(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                                       const Tensor& log_weight, const Tensor& key_mask, const Tensor& out,
                                       const Tensor& den, const Tensor& dout, const Tensor& dlog_norm, Tensor& dxq,
                                       Tensor& dxk, Tensor& dv, Tensor& domega, bool causal, std::int64_t chunk) {
  check_dtype<T>("random_feature_attention_backward", {{"xq", &xq}, {"xk", &xk}, {"v", &v}, {"dout", &dout}, {"dxq", &dxq}});
  DeviceGuard guard(xq);
  LaShape g = plan(xq.shape()[0], xq.shape()[1], xq.shape()[2], xk.shape()[2], omega.shape()[1], v.shape()[3],
                   xq.shape()[3], causal, 0.0, chunk, key_mask, xq.device(), "random_feature_attention");
  g.dlog_norm = row_stat(dlog_norm, den, "random_feature_attention_backward", "dlog_norm");
  backward_passes<T, FeatureLogits<T>, true>(feature_source<T>(xq, xk, omega, log_weight), v, g, out, den, dout, dxq,
                                             dxk, dv, domega.defined() ? &domega : nullptr);
}

// bf16 runs the tensor-core passes, checked against the f32 ones at each configuration's
// first call (bf16_reference_check.h).
void linear_attention_forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                   Tensor& out, Tensor& den, Tensor& log_norm, bool causal, double eps,
                                   std::int64_t chunk) {
  bf16_check::run("linear_attention_forward", bf16_check::row_statistics({5, 6}), &linear_attention_forward<BFloat16>,
                  &linear_attention_forward<float>, q, k, v, key_mask, out, den, log_norm, causal, eps, chunk);
}
void linear_attention_backward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    const Tensor& out, const Tensor& den, const Tensor& dout, const Tensor& dlog_norm,
                                    Tensor& dq, Tensor& dk, Tensor& dv, bool causal, std::int64_t chunk) {
  bf16_check::run("linear_attention_backward", bf16_check::row_statistics({5, 7}), &linear_attention_backward<BFloat16>,
                  &linear_attention_backward<float>, q, k, v, key_mask, out, den, dout, dlog_norm, dq, dk, dv, causal, chunk);
}
void random_feature_attention_forward_bf16(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                                           const Tensor& log_weight, const Tensor& key_mask, Tensor& out, Tensor& den,
                                           Tensor& log_norm, bool causal, double eps, std::int64_t chunk) {
  bf16_check::run("random_feature_attention_forward", bf16_check::row_statistics({7, 8}),
                  &random_feature_attention_forward<BFloat16>,
                  &random_feature_attention_forward<float>, xq, xk, v, omega, log_weight, key_mask, out, den, log_norm,
                  causal, eps, chunk);
}
void random_feature_attention_backward_bf16(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                                            const Tensor& log_weight, const Tensor& key_mask, const Tensor& out,
                                            const Tensor& den, const Tensor& dout, const Tensor& dlog_norm, Tensor& dxq,
                                            Tensor& dxk, Tensor& dv, Tensor& domega, bool causal, std::int64_t chunk) {
  bf16_check::run("random_feature_attention_backward", bf16_check::row_statistics({7, 9}),
                  &random_feature_attention_backward<BFloat16>,
                  &random_feature_attention_backward<float>, xq, xk, v, omega, log_weight, key_mask, out, den, dout,
                  dlog_norm, dxq, dxk, dv, domega, causal, chunk);
}

DARK_REGISTER_KERNEL(linear_attention_forward, cuda, f32, &linear_attention_forward<float>);
DARK_REGISTER_KERNEL(linear_attention_forward, cuda, bf16, &linear_attention_forward_bf16);
DARK_REGISTER_KERNEL(linear_attention_backward, cuda, f32, &linear_attention_backward<float>);
DARK_REGISTER_KERNEL(linear_attention_backward, cuda, bf16, &linear_attention_backward_bf16);
DARK_REGISTER_KERNEL(random_feature_attention_forward, cuda, f32, &random_feature_attention_forward<float>);
DARK_REGISTER_KERNEL(random_feature_attention_forward, cuda, bf16, &random_feature_attention_forward_bf16);
DARK_REGISTER_KERNEL(random_feature_attention_backward, cuda, f32, &random_feature_attention_backward<float>);
DARK_REGISTER_KERNEL(random_feature_attention_backward, cuda, bf16, &random_feature_attention_backward_bf16);

}  // namespace
}  // namespace dark::cuda
