// Sliding-window linear attention on CUDA, for f32 and bf16 inputs (f32 accumulation
// throughout): linear_attention with window > 0, forward and backward. Same contract and
// notation as the CPU kernel (core/cpu/windowed_linear_attention.cpp): query t sees the real
// keys j in (t - w, t]; kappa_j = max_f k[j, f] is each key's own offset, o_t the max of kappa
// over t's window, and for a chunk of C queries every key chunk is
//   middle  inside every row's window: its state S_kc, held at omax_kc (its largest kappa),
//           enters M = sum_kc exp(omax_kc - O) S_kc at O = the max of those omax_kc, and row
//           t adds exp(O - o_t) Phi_t M (every factor <= 1);
//   masked  the chunk itself and the (at most two) chunks that straddle the window's trailing
//           edge: P = Phi E^T times D[t][j] = exp(kappa_j - o_t) on visible keys, 0 elsewhere;
//   hidden  everything else, never touched.
// No prefix state is ever subtracted (a difference of prefix sums loses the window's digits
// in float32 once the prefix is large).
//
// Why not the causal kernel's scan over segments: with a window, a query chunk depends only on
// the ceil(w / C) + 1 key chunks before it, so every pass is parallel over (batch, kv head,
// chunk) with no carried state, and a sequence gives chunks x B x Hkv blocks:
//   1. kappa (B Hkv, T): the causal kernel's per-key max pass (linear_attention_chunks.cuh);
//   2. chunk states: one block per key chunk writes omax_kc and S_kc = sum over its real keys
//      of exp(k_j - omax_kc)^T [v_j, 1] to a global scratch (B Hkv, chunks, m, W). All are
//      kept (the CPU keeps a ring of the last ones) because every query chunk reads its own
//      window's: O(T m W / C) floats per kv head (65 a position at m = Dv = C = 64, against
//      128 values of k and v);
//   3. offsets: one thread per query, o_t = the max over the partial chunks at both ends of
//      its window and the omax of the whole chunks between (O(w / C + C) reads), and each
//      query chunk's middle offset O_qc;
//   4. forward, one block per query chunk: M in shared memory (the middle states added in
//      ascending chunk order), then per query head Y = sum over masked chunks of
//      (Phi E^T o D) Vx + exp(O - o_t) Phi M, out = Y[:Dv] / (Y[Dv] + eps), and (when wanted)
//      log_norm_t = qoff_t + o_t + log(Y[Dv] + eps), qoff_t the query's max logit.
// The backward recomputes 1-3 (G, wherever loaded, adds a given dlog_norm_t / den'_t to its last
// column: log_norm's gradient), then
//   5. dq, one block per query chunk: dPhi = sum over masked chunks of (G Vx^T o D) E
//      + exp(O - o_t) G M^T, dq = Phi o dPhi (the CPU's forward sweep);
//   6. query-chunk states, into the scratch of 2 (no longer needed): Q_qc = sum over the
//      group's heads and the chunk's rows of exp(O_qc - o_t) Phi_t^T G_t, held at O_qc;
//   7. dk, dv, one block per key chunk (the CPU's reverse sweep): R = sum over the query
//      chunks that hold kc in their middle of exp(omax_kc - O_qc) Q_qc (ascending qc) gives
//      dE_j = exp(kappa_j - omax_kc) Vx_j R^T and dVx_j = exp(kappa_j - omax_kc) E_j R; the
//      masked pairs add (G Vx^T o D)^T Phi and (Phi E^T o D)^T G.
// Work: the middle sums add O(w / C) states of m W per chunk (O(T w m W / C^2) in all), the
// products are O(T (C (m + W) + m W)) per head. Deterministic: every sum has a fixed order and
// there are no atomics, so the same inputs give the same bits. Products are tile::block_mma's
// (bf16 inputs on the tensor cores, those of G, whose terms cancel, with two bf16 per operand;
// f32 inputs in f32 on the CUDA cores), as in linear_attention.cu, whose chunk loaders these
// kernels share; results match the CPU to rounding, not bit for bit. The chunk length is the
// requested one rounded down to 64, 32, 16 or 8, or less when m and Dv are large.
#include <algorithm>
#include <cstdint>

#include "core/cuda/bf16_reference_check.h"
#include "core/cuda/linear_attention_chunks.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

enum class Pair { hidden, middle, masked };

// The window's chunk geometry (the CPU kernel's Window): chunk c holds positions
// [c C, c C + size(c)); only the last may be short.
struct WinShape {
  LaShape g;  // causal, no segments
  std::int64_t window, chunks;

  __device__ std::int64_t start(std::int64_t c) const { return c * g.chunk; }
  __device__ std::int64_t size(std::int64_t c) const { return g.len - start(c) < g.chunk ? g.len - start(c) : g.chunk; }
  // Chunks that can touch each other are at most reach() apart.
  __device__ std::int64_t reach() const { return (window + g.chunk - 1) / g.chunk + 1; }
  // The key chunks of query chunk qc are first_key(qc) .. qc, the query chunks of key chunk
  // kc are kc .. last_query(kc).
  __device__ std::int64_t first_key(std::int64_t qc) const { return qc - reach() > 0 ? qc - reach() : 0; }
  __device__ std::int64_t last_query(std::int64_t kc) const {
    return kc + reach() < chunks - 1 ? kc + reach() : chunks - 1;
  }
  __device__ Pair pair(std::int64_t qc, std::int64_t kc) const {
    if (kc == qc) return Pair::masked;
    if (kc > qc) return Pair::hidden;
    const std::int64_t c0 = start(qc), k0 = start(kc);
    if (k0 + size(kc) - 1 <= c0 - window) return Pair::hidden;  // past the first row's window
    if (k0 >= c0 + size(qc) - window) return Pair::middle;     // inside the last row's window
    return Pair::masked;
  }
  // O_qc: the largest omax of qc's middle chunks (-inf when none holds a real key).
  __device__ float middle_offset(const float* omax_row, std::int64_t qc) const {
    float at = kNegInf;
    for (std::int64_t kc = first_key(qc); kc < qc; ++kc)
      if (pair(qc, kc) == Pair::middle) at = fmaxf(at, omax_row[kc]);
    return at;
  }
};

// Shared memory: one chunk (ChunkSmem: keys, queries, G, products, weights in dec) plus the
// query rows' window offsets and the m x W middle state (M, or R in the dk, dv kernel).
struct WinSmem : ChunkSmem {
  float* oq;
  float* mid;

  static std::size_t floats(std::int64_t c, std::int64_t m, std::int64_t w) {
    return ChunkSmem::floats(c, m, w, 0) + static_cast<std::size_t>(c + m * w);
  }
  __device__ static WinSmem carve(float* base, const LaShape& g) {
    WinSmem s;
    static_cast<ChunkSmem&>(s) = ChunkSmem::carve(base, g.chunk, g.m, g.w, 0);
    s.oq = base + ChunkSmem::floats(g.chunk, g.m, g.w, 0);
    s.mid = s.oq + g.chunk;
    return s;
  }
};

// ---------------------------------------------------------------- passes 2 and 3

// omax_kc and, when the chunk holds a real key, S_kc (m x W) at omax_kc. omax: (B Hkv, chunks),
// states: (B Hkv, chunks, m, W).
template <class T>
__global__ void __launch_bounds__(kLaThreads, 1) win_chunk_state_kernel(GivenLogits<T> src, const T* v, WinShape ws,
                                                                      const float* kappa, float* omax, float* states) {
  DARK_DYNAMIC_SHARED(float, smem);
  const LaShape& g = ws.g;
  const WinSmem s = WinSmem::carve(smem, g);
  const std::int64_t kc = blockIdx.x, bkv = blockIdx.y, b = bkv / g.hkv, kvh = bkv % g.hkv;
  const std::int64_t k0 = ws.start(kc), nk = ws.size(kc);
  float at = kNegInf;  // every thread takes the same max (C values)
  for (std::int64_t j = k0; j < k0 + nk; ++j) at = fmaxf(at, kappa[bkv * g.len + j]);
  if (threadIdx.x == 0) omax[bkv * ws.chunks + kc] = at;
  if (at == kNegInf) return;  // only padded keys: the state is never read
  load_keys(g, src, v, kappa, b, kvh, k0, nk, s, true, at);
  tile::block_mma<T, false>(states + (bkv * ws.chunks + kc) * g.m * g.w, g.w, g.m, g.w, static_cast<int>(nk),
                            mat(s.e, 1, g.lm), mat(s.vx, g.lw, 1));
}

// o (B Hkv, T): each query's window offset, the max of kappa over (t - w, t] taken from the
// partial chunks at both ends and the omax of the whole chunks between (max is exact, so
// this is the CPU's sliding max); mid_at (B Hkv, chunks): each query chunk's O, written by the
// thread of its first row.
__global__ void win_offsets_kernel(WinShape ws, const float* kappa, const float* omax, float* o, float* mid_at) {
  const LaShape& g = ws.g;
  const std::int64_t c = g.chunk;
  for (std::int64_t e = global_thread(); e < g.batch * g.hkv * g.len; e += grid_threads()) {
    const std::int64_t bkv = e / g.len, t = e % g.len;
    const float* kr = kappa + bkv * g.len;
    const float* cm = omax + bkv * ws.chunks;
    const std::int64_t lo = t - ws.window + 1 > 0 ? t - ws.window + 1 : 0, c_lo = lo / c, c_hi = t / c;
    float at = kNegInf;
    if (c_lo == c_hi) {
      for (std::int64_t j = lo; j <= t; ++j) at = fmaxf(at, kr[j]);
    } else {
      for (std::int64_t j = lo; j < (c_lo + 1) * c; ++j) at = fmaxf(at, kr[j]);
      for (std::int64_t k = c_lo + 1; k < c_hi; ++k) at = fmaxf(at, cm[k]);
      for (std::int64_t j = c_hi * c; j <= t; ++j) at = fmaxf(at, kr[j]);
    }
    o[e] = at;
    if (t % c == 0) mid_at[bkv * ws.chunks + c_hi] = ws.middle_offset(cm, c_hi);
  }
}

// ---------------------------------------------------------------- chunk pieces

// s.oq = o of query rows [c0, c0 + n).
__device__ void load_row_offsets(const LaShape& g, const float* o, std::int64_t bkv, std::int64_t c0, std::int64_t n,
                                 const WinSmem& s) {
  __syncthreads();  // every reader of the previous rows' offsets is done
  for (int r = threadIdx.x; r < n; r += blockDim.x) s.oq[r] = o[bkv * g.len + c0 + r];
  __syncthreads();
}

// D (n x nk, ld C) of masked pair (qc, kc) into s.dec: exp(kappa_j - o_t) where key j is real
// and in query t's window, else 0. Needs the keys of kc (s.oc, s.is_real) and the offsets of
// qc's rows (s.oq); read after the next barrier (apply_weights starts with one).
__device__ void build_window_weights(const WinShape& ws, std::int64_t qc, std::int64_t kc, const WinSmem& s) {
  const std::int64_t c0 = ws.start(qc), k0 = ws.start(kc);
  const int n = static_cast<int>(ws.size(qc)), nk = static_cast<int>(ws.size(kc));
  for (int idx = threadIdx.x; idx < n * nk; idx += blockDim.x) {
    const int r = idx / nk, c = idx % nk;
    const std::int64_t t = c0 + r, j = k0 + c;
    const bool seen = j <= t && j > t - ws.window && s.is_real[c];
    s.dec[r * ws.g.lc + c] = seen ? expf(s.oc[c] - s.oq[r]) : 0.0f;
  }
}

// out = sum over the chunks i in [i0, i1] with take(i) of factor(i) part(i) (m x W each),
// added in ascending i by the thread that owns each element; returns whether any chunk was
// taken (every thread gets the same answer). The caller synchronises before reading `out`.
template <class Take, class Factor>
__device__ bool sum_states(const LaShape& g, const float* parts, std::int64_t i0, std::int64_t i1, Take&& take,
                           Factor&& factor, float* out) {
  bool any = false;
  for (std::int64_t i = i0; i <= i1; ++i) any = any || take(i);
  if (!any) return false;
  const std::int64_t per = static_cast<std::int64_t>(g.m) * g.w;
  for (std::int64_t idx = threadIdx.x; idx < per; idx += blockDim.x) {
    float acc = 0.0f;
    for (std::int64_t i = i0; i <= i1; ++i)
      if (take(i)) acc += parts[i * per + idx] * factor(i);
    out[idx] = acc;
  }
  return true;
}

// M of query chunk qc at O = at (finite) into s.mid: its middle chunks' states.
__device__ void middle_state(const WinShape& ws, const float* states, const float* omax, std::int64_t bkv,
                             std::int64_t qc, float at, const WinSmem& s) {
  const float* cm = omax + bkv * ws.chunks;
  sum_states(
      ws.g, states + bkv * ws.chunks * ws.g.m * ws.g.w, ws.first_key(qc), qc - 1,
      [&](std::int64_t kc) { return ws.pair(qc, kc) == Pair::middle && cm[kc] != kNegInf; },
      [&](std::int64_t kc) { return expf(cm[kc] - at); }, s.mid);
}

// The query chunk of a forward or dq block: chunk blockIdx.x of (batch, kv head) blockIdx.y,
// its rows [c0, c0 + n), its middle offset O (`at`) and, where O is finite, its middle sum M
// in s.mid; its rows' offsets are in s.oq.
struct QueryChunk {
  std::int64_t qc, bkv, b, kvh, c0;
  int n;
  float at;
};

__device__ QueryChunk enter_query_chunk(const WinShape& ws, const float* o, const float* omax, const float* mid_at,
                                        const float* states, const WinSmem& s) {
  const LaShape& g = ws.g;
  QueryChunk q;
  q.qc = blockIdx.x, q.bkv = blockIdx.y, q.b = q.bkv / g.hkv, q.kvh = q.bkv % g.hkv;
  q.c0 = ws.start(q.qc);
  q.n = static_cast<int>(ws.size(q.qc));
  q.at = mid_at[q.bkv * ws.chunks + q.qc];
  if (q.at != kNegInf) middle_state(ws, states, omax, q.bkv, q.qc, q.at, s);
  load_row_offsets(g, o, q.bkv, q.c0, q.n, s);
  return q;
}

// ---------------------------------------------------------------- pass 4: forward

template <class T>
__global__ void __launch_bounds__(kLaThreads, 1) win_forward_kernel(GivenLogits<T> src, const T* v, WinShape ws,
                                                                 const float* kappa, const float* o, const float* omax,
                                                                 const float* mid_at, const float* states, T* out,
                                                                 T* den) {
  DARK_DYNAMIC_SHARED(float, smem);
  const LaShape& g = ws.g;
  const WinSmem s = WinSmem::carve(smem, g);
  const QueryChunk q = enter_query_chunk(ws, o, omax, mid_at, states, s);
  const std::int64_t qc = q.qc, b = q.b, kvh = q.kvh, c0 = q.c0;
  const int n = q.n;
  const float at = q.at;
  for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
    load_queries(g, src, b, h, c0, n, s);
    block_zero(s.y, n * g.lw);
    for (std::int64_t kc = ws.first_key(qc); kc <= qc; ++kc) {
      if (ws.pair(qc, kc) != Pair::masked) continue;
      const int nk = static_cast<int>(ws.size(kc));
      load_keys(g, src, v, kappa, b, kvh, ws.start(kc), nk, s, false, 0.0f);
      build_window_weights(ws, qc, kc, s);
      tile::block_mma<T, false>(s.p, g.lc, n, nk, g.m, mat(s.phi, g.lm, 1), mat(s.e, 1, g.lm));
      apply_weights(s.p, n, nk, g.lc, s);
      tile::block_mma<T, true>(s.y, g.lw, n, g.w, nk, mat(s.p, g.lc, 1), mat(s.vx, g.lw, 1));
    }
    __syncthreads();
    if (at != kNegInf) {
      tile::block_mma<T, false>(s.dvx, g.lw, n, g.w, g.m, mat(s.phi, g.lm, 1), mat<float>(s.mid, g.w, 1));
      __syncthreads();
      for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) s.y[g.at_w(idx)] += s.dvx[g.at_w(idx)] * expf(at - s.oq[idx / g.w]);
      __syncthreads();
    }
    for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) {
      const int r = idx / g.w, j = idx % g.w;
      const float d = s.y[r * g.lw + g.dv] + g.eps;
      if (j < g.dv) {
        out[((b * g.len + c0 + r) * g.hq + h) * g.dv + j] = T(s.oq[r] == kNegInf ? 0.0f : s.y[g.at_w(idx)] / d);
      } else {
        den[(b * g.hq + h) * g.len + c0 + r] = T(d);
        if (g.log_norm) g.log_norm[(b * g.hq + h) * g.len + c0 + r] = log_normaliser(s.qoff[r], s.oq[r], d);
      }
    }
  }
}

// ---------------------------------------------------------------- backward

// Pass 5: dPhi = sum over masked pairs of (G Vx^T o D) E + exp(O - o_t) G M^T, dq = Phi o dPhi.
template <class T>
__global__ void __launch_bounds__(kLaThreads, 1) win_dq_kernel(GivenLogits<T> src, const T* v, WinShape ws,
                                                            const float* kappa, const float* o, const float* omax,
                                                            const float* mid_at, const float* states, const T* out,
                                                            const T* den, const T* dout, T* dq) {
  DARK_DYNAMIC_SHARED(float, smem);
  const LaShape& g = ws.g;
  const WinSmem s = WinSmem::carve(smem, g);
  const QueryChunk q = enter_query_chunk(ws, o, omax, mid_at, states, s);
  const std::int64_t qc = q.qc, b = q.b, kvh = q.kvh, c0 = q.c0;
  const int n = q.n;
  const float at = q.at;
  for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
    load_grads(g, out, den, dout, b, h, c0, n, s.oq, s);
    block_zero(s.dphi, n * g.lm);
    for (std::int64_t kc = ws.first_key(qc); kc <= qc; ++kc) {
      if (ws.pair(qc, kc) != Pair::masked) continue;
      const int nk = static_cast<int>(ws.size(kc));
      load_keys(g, src, v, kappa, b, kvh, ws.start(kc), nk, s, false, 0.0f);
      build_window_weights(ws, qc, kc, s);
      tile::block_mma<Precise<T>, false>(s.p, g.lc, n, nk, g.w, mat(s.gm, g.lw, 1), mat(s.vx, 1, g.lw));
      apply_weights(s.p, n, nk, g.lc, s);
      tile::block_mma<T, true>(s.dphi, g.lm, n, g.m, nk, mat(s.p, g.lc, 1), mat(s.e, g.lm, 1));
    }
    __syncthreads();
    if (at != kNegInf) {
      tile::block_mma<Precise<T>, false>(s.de, g.lm, n, g.m, g.w, mat(s.gm, g.lw, 1), mat<float>(s.mid, 1, g.w));
      __syncthreads();
      for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x)
        s.dphi[g.at_m(idx)] += s.de[g.at_m(idx)] * expf(at - s.oq[idx / g.m]);
    }
    load_queries(g, src, b, h, c0, n, s);
    for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) {
      const int r = idx / g.m, f = idx % g.m;
      dq[((b * g.len + c0 + r) * g.hq + h) * g.m + f] = T(s.phi[g.at_m(idx)] * s.dphi[g.at_m(idx)]);
    }
  }
}

// Pass 6: Q_qc (m x W, held at O_qc) into qstates (B Hkv, chunks, m, W) where O_qc is finite
// (elsewhere no key chunk reads it).
template <class T>
__global__ void __launch_bounds__(kLaThreads, 1) win_query_state_kernel(GivenLogits<T> src, WinShape ws, const float* o,
                                                                     const float* mid_at, const T* out, const T* den,
                                                                     const T* dout, float* qstates) {
  DARK_DYNAMIC_SHARED(float, smem);
  const LaShape& g = ws.g;
  const WinSmem s = WinSmem::carve(smem, g);
  const std::int64_t qc = blockIdx.x, bkv = blockIdx.y, b = bkv / g.hkv, kvh = bkv % g.hkv;
  const std::int64_t c0 = ws.start(qc);
  const int n = static_cast<int>(ws.size(qc));
  const float at = mid_at[bkv * ws.chunks + qc];
  if (at == kNegInf) return;
  float* qs = qstates + (bkv * ws.chunks + qc) * g.m * g.w;
  block_zero(qs, g.m * g.w);
  load_row_offsets(g, o, bkv, c0, n, s);  // its barriers also order the zeros before the sums
  for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
    load_queries(g, src, b, h, c0, n, s);
    load_grads(g, out, den, dout, b, h, c0, n, s.oq, s);
    for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) {
      const float ot = s.oq[idx / g.w];
      if (ot != kNegInf) s.gm[g.at_w(idx)] *= expf(at - ot);  // else G is 0 already
    }
    __syncthreads();
    tile::block_mma<T, true>(qs, g.w, g.m, g.w, n, mat(s.phi, 1, g.lm), mat(s.gm, g.lw, 1));
  }
}

// Pass 7: dk, dv of key chunk kc from R (its middle query chunks' Q) and its masked pairs.
template <class T>
__global__ void __launch_bounds__(kLaThreads, 1) win_dkv_kernel(GivenLogits<T> src, const T* v, WinShape ws,
                                                             const float* kappa, const float* o, const float* omax,
                                                             const float* mid_at, const float* qstates, const T* out,
                                                             const T* den, const T* dout, T* dk, T* dv) {
  DARK_DYNAMIC_SHARED(float, smem);
  const LaShape& g = ws.g;
  const WinSmem s = WinSmem::carve(smem, g);
  const std::int64_t kc = blockIdx.x, bkv = blockIdx.y, b = bkv / g.hkv, kvh = bkv % g.hkv;
  const std::int64_t k0 = ws.start(kc);
  const int nk = static_cast<int>(ws.size(kc));
  const float at = omax[bkv * ws.chunks + kc];
  const float* qo = mid_at + bkv * ws.chunks;
  const bool held =
      at != kNegInf &&
      sum_states(
          g, qstates + bkv * ws.chunks * g.m * g.w, kc + 1, ws.last_query(kc),
          [&](std::int64_t qc) { return ws.pair(qc, kc) == Pair::middle && qo[qc] != kNegInf; },
          [&](std::int64_t qc) { return expf(at - qo[qc]); }, s.mid);
  load_keys(g, src, v, kappa, b, kvh, k0, nk, s, false, 0.0f);  // its barriers also publish R
  if (held) {  // dE = e^(kappa - omax) Vx R^T, dVx = e^(kappa - omax) E R
    tile::block_mma<Precise<T>, false>(s.de, g.lm, nk, g.m, g.w, mat(s.vx, g.lw, 1), mat<float>(s.mid, 1, g.w));
    tile::block_mma<T, false>(s.dvx, g.lw, nk, g.w, g.m, mat(s.e, g.lm, 1), mat<float>(s.mid, g.w, 1));
    __syncthreads();
    for (int idx = threadIdx.x; idx < nk * g.m; idx += blockDim.x)
      if (s.is_real[idx / g.m]) s.de[g.at_m(idx)] *= expf(s.oc[idx / g.m] - at);
    for (int idx = threadIdx.x; idx < nk * g.w; idx += blockDim.x)
      if (s.is_real[idx / g.w]) s.dvx[g.at_w(idx)] *= expf(s.oc[idx / g.w] - at);
  } else {
    block_zero(s.de, nk * g.lm);
    block_zero(s.dvx, nk * g.lw);
  }
  for (std::int64_t qc = kc; qc <= ws.last_query(kc); ++qc) {
    if (ws.pair(qc, kc) != Pair::masked) continue;
    const std::int64_t c0 = ws.start(qc);
    const int n = static_cast<int>(ws.size(qc));
    load_row_offsets(g, o, bkv, c0, n, s);
    build_window_weights(ws, qc, kc, s);
    for (std::int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
      load_queries(g, src, b, h, c0, n, s);
      load_grads(g, out, den, dout, b, h, c0, n, s.oq, s);
      // M = G Vx^T o D;  dE += M^T Phi;  P = Phi E^T o D;  dVx += P^T G
      tile::block_mma<Precise<T>, false>(s.p, g.lc, n, nk, g.w, mat(s.gm, g.lw, 1), mat(s.vx, 1, g.lw));
      apply_weights(s.p, n, nk, g.lc, s);
      tile::block_mma<T, true>(s.de, g.lm, nk, g.m, n, mat(s.p, 1, g.lc), mat(s.phi, g.lm, 1));
      __syncthreads();
      tile::block_mma<T, false>(s.p, g.lc, n, nk, g.m, mat(s.phi, g.lm, 1), mat(s.e, 1, g.lm));
      apply_weights(s.p, n, nk, g.lc, s);
      tile::block_mma<T, true>(s.dvx, g.lw, nk, g.w, n, mat(s.p, 1, g.lc), mat(s.gm, g.lw, 1));
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < nk * g.m; idx += blockDim.x) {
    const int r = idx / g.m, f = idx % g.m;
    dk[((b * g.len + k0 + r) * g.hkv + kvh) * g.m + f] = T(s.e[g.at_m(idx)] * s.de[g.at_m(idx)]);
  }
  for (int idx = threadIdx.x; idx < nk * g.w; idx += blockDim.x) {
    const int r = idx / g.w, j = idx % g.w;
    if (j < g.dv) dv[((b * g.len + k0 + r) * g.hkv + kvh) * g.dv + j] = T(s.dvx[g.at_w(idx)]);
  }
}

// ---------------------------------------------------------------- host side

const char* const kOp = "linear_attention (sliding window)";

// Shapes and the chunk length: the largest of 64, 32, 16, 8 at most the requested one whose
// shared memory (WinSmem) fits the GPU.
WinShape plan(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, std::int64_t window,
              double eps, std::int64_t chunk) {
  LaShape g{};
  g.batch = q.shape()[0], g.len = q.shape()[1], g.hq = q.shape()[2], g.hkv = k.shape()[2];
  g.m = static_cast<int>(q.shape()[3]), g.dv = static_cast<int>(v.shape()[3]), g.w = g.dv + 1;
  g.group = g.hq / g.hkv;
  g.causal = true;
  g.eps = static_cast<float>(eps);
  g.key_mask = key_mask.defined() ? key_mask.data<std::int32_t>() : nullptr;
  DARK_CHECK(window >= 1, kOp, ": window must be >= 1, got ", window);
  const Device device = q.device();
  int optin = 0;
  DARK_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device.index));
  g.chunk = pick_chunk(chunk, optin, [&](int c) { return WinSmem::floats(c, g.m, g.w); });
  g.lm = padded_row(g.m), g.lw = padded_row(g.w), g.lc = padded_row(g.chunk);
  DARK_CHECK(g.chunk > 0, kOp, " on ", device.to_string(), ": ", g.m, " features with value dimension ", g.dv,
             " need more shared memory than the GPU has (", optin, " bytes per block)");
  // A window past the sequence sees what one of length T sees (and keeps reach() small).
  WinShape ws{g, window < g.len ? window : std::max<std::int64_t>(g.len, 1), (g.len + g.chunk - 1) / g.chunk};
  DARK_CHECK(ws.chunks <= 2147483647 && g.batch * g.hkv <= 65535, kOp, ": ", g.batch, " x ", g.hkv,
             " (batch x kv heads) blocks exceed the CUDA grid limit of 65535");
  return ws;
}

// One block per (chunk, b kv) with the chunk's shared memory.
template <class K>
void launch_chunks(K* kernel, const WinShape& ws, auto&&... args) {
  const std::size_t bytes = WinSmem::floats(ws.g.chunk, ws.g.m, ws.g.w) * sizeof(float);
  allow_dynamic_shared(kernel, bytes);
  const dim3 grid(static_cast<unsigned>(ws.chunks), static_cast<unsigned>(ws.g.batch * ws.g.hkv));
  launch(kernel, {grid, kLaThreads, bytes}, args...);
}

// Scratch of one call: kappa and o (B Hkv, T), omax and mid_at (B Hkv, chunks) and the chunk
// states (B Hkv, chunks, m, W).
struct Scratch {
  Tensor kappa, o, omax, mid_at, states;
  Scratch(const WinShape& ws, const Device& device)
      : kappa(Tensor::empty({ws.g.batch * ws.g.hkv, ws.g.len}, DType::f32, device)),
        o(Tensor::empty({ws.g.batch * ws.g.hkv, ws.g.len}, DType::f32, device)),
        omax(Tensor::empty({ws.g.batch * ws.g.hkv, ws.chunks}, DType::f32, device)),
        mid_at(Tensor::empty({ws.g.batch * ws.g.hkv, ws.chunks}, DType::f32, device)),
        states(Tensor::empty({ws.g.batch * ws.g.hkv, ws.chunks, ws.g.m, ws.g.w}, DType::f32, device)) {}
};

// Passes 1-3: kappa, the chunk states with omax, the window offsets o and mid_at.
template <class T>
void offsets_and_states(const GivenLogits<T>& src, const T* v, const WinShape& ws, Scratch& x) {
  const LaShape& g = ws.g;
  launch_key_max<T>(src, g, x.kappa.data<float>());
  launch_chunks(win_chunk_state_kernel<T>, ws, src, v, ws, x.kappa.data<float>(), x.omax.data<float>(),
                x.states.data<float>());
  launch(win_offsets_kernel, {grid_for(g.batch * g.hkv * g.len), kThreads}, ws, x.kappa.data<float>(),
         x.omax.data<float>(), x.o.data<float>(), x.mid_at.data<float>());
}

template <class T>
void windowed_linear_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                       Tensor& out, Tensor& den, Tensor& log_norm, std::int64_t window, double eps,
                                       std::int64_t chunk) {
  check_dtype<T>("windowed_linear_attention_forward", {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"den", &den}});
  DeviceGuard guard(q);
  WinShape ws = plan(q, k, v, key_mask, window, eps, chunk);
  ws.g.log_norm = row_stat(log_norm, den, "windowed_linear_attention_forward", "log_norm");
  if (ws.g.batch * ws.g.len == 0) return;
  const GivenLogits<T> src{q.data<T>(), k.data<T>()};
  Scratch x(ws, q.device());
  offsets_and_states<T>(src, v.data<T>(), ws, x);
  launch_chunks(win_forward_kernel<T>, ws, src, v.data<T>(), ws, x.kappa.data<float>(), x.o.data<float>(),
                x.omax.data<float>(), x.mid_at.data<float>(), x.states.data<float>(), out.data<T>(), den.data<T>());
}

template <class T>
void windowed_linear_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                        const Tensor& out, const Tensor& den, const Tensor& dout,
                                        const Tensor& dlog_norm, Tensor& dq, Tensor& dk, Tensor& dv,
                                        std::int64_t window, std::int64_t chunk) {
  check_dtype<T>("windowed_linear_attention_backward",
                 {{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  DeviceGuard guard(q);
  WinShape ws = plan(q, k, v, key_mask, window, 0.0, chunk);
  ws.g.dlog_norm = row_stat(dlog_norm, den, "windowed_linear_attention_backward", "dlog_norm");
  if (ws.g.batch * ws.g.len == 0) return;
  const GivenLogits<T> src{q.data<T>(), k.data<T>()};
  Scratch x(ws, q.device());
  offsets_and_states<T>(src, v.data<T>(), ws, x);
  launch_chunks(win_dq_kernel<T>, ws, src, v.data<T>(), ws, x.kappa.data<float>(), x.o.data<float>(),
                x.omax.data<float>(), x.mid_at.data<float>(), x.states.data<float>(), out.data<T>(), den.data<T>(),
                dout.data<T>(), dq.data<T>());
  Tensor& qstates = x.states;  // reused: the chunk states are done
  launch_chunks(win_query_state_kernel<T>, ws, src, ws, x.o.data<float>(), x.mid_at.data<float>(), out.data<T>(),
                den.data<T>(), dout.data<T>(), qstates.data<float>());
  launch_chunks(win_dkv_kernel<T>, ws, src, v.data<T>(), ws, x.kappa.data<float>(), x.o.data<float>(),
                x.omax.data<float>(), x.mid_at.data<float>(), qstates.data<float>(), out.data<T>(), den.data<T>(),
                dout.data<T>(), dk.data<T>(), dv.data<T>());
}

// bf16 runs the tensor-core passes, checked against the f32 ones at each configuration's
// first call (bf16_reference_check.h).
void windowed_linear_attention_forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                            Tensor& out, Tensor& den, Tensor& log_norm, std::int64_t window, double eps,
                                            std::int64_t chunk) {
  bf16_check::run("windowed_linear_attention_forward", bf16_check::row_statistics({5, 6}),
                  &windowed_linear_attention_forward<BFloat16>,
                  &windowed_linear_attention_forward<float>, q, k, v, key_mask, out, den, log_norm, window, eps, chunk);
}
void windowed_linear_attention_backward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                             const Tensor& out, const Tensor& den, const Tensor& dout,
                                             const Tensor& dlog_norm, Tensor& dq, Tensor& dk, Tensor& dv,
                                             std::int64_t window, std::int64_t chunk) {
  bf16_check::run("windowed_linear_attention_backward", bf16_check::row_statistics({5, 7}),
                  &windowed_linear_attention_backward<BFloat16>,
                  &windowed_linear_attention_backward<float>, q, k, v, key_mask, out, den, dout, dlog_norm, dq, dk, dv,
                  window, chunk);
}

DARK_REGISTER_KERNEL(windowed_linear_attention_forward, cuda, f32, &windowed_linear_attention_forward<float>);
DARK_REGISTER_KERNEL(windowed_linear_attention_forward, cuda, bf16, &windowed_linear_attention_forward_bf16);
DARK_REGISTER_KERNEL(windowed_linear_attention_backward, cuda, f32, &windowed_linear_attention_backward<float>);
DARK_REGISTER_KERNEL(windowed_linear_attention_backward, cuda, bf16, &windowed_linear_attention_backward_bf16);

}  // namespace
}  // namespace dark::cuda
