// The chunk pieces of the CUDA linear-attention kernels, shared by linear_attention.cu (causal
// and bidirectional, on given or computed logits) and windowed_linear_attention.cu (sliding
// window): the shape of a call, the given-logits source, the per-key max pass, the
// shared-memory layout of one chunk with its loaders (keys, queries, output gradients) and
// the choice of the chunk length. Notation of core/cpu/linear_attention.cpp. Every chunk
// loader starts with a block barrier, so no thread overwrites what a slower one still reads.
// Internal to core/cuda: everything is in an unnamed namespace, one copy per kernel file.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cuda/block_mma.cuh"
#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.cuh"

namespace dark::cuda {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kLaThreads = 256;

struct LaShape {
  std::int64_t batch, len, hq, hkv, group;
  int m, dv, w;                    // features, value dimension, w = dv + 1
  int r;                           // transformed dimension (fused op), 0 otherwise
  int chunk;
  int lm, lw, lc;                  // row strides of the chunk's m-, w- and chunk-wide matrices in
                                   // shared memory (padded_row; ChunkSmem)
  std::int64_t seg_len, segments;  // linear_attention.cu's segments (unused with a window)
  bool causal;
  float eps;
  float log_m_half;                // ln(m) / 2 (fused op)
  const std::int32_t* key_mask;    // (B, T); nullptr: every key is real
  float* log_norm;                 // forward: (B, Hq, T), each row's log normaliser; nullptr: not wanted
  const float* dlog_norm;          // backward: (B, Hq, T), its gradient; nullptr: none

  // Element idx of a dense walk over n rows of m (w) columns, in the padded layout.
  __device__ int at_m(int idx) const { return idx / m * lm + idx % m; }
  __device__ int at_w(int idx) const { return idx / w * lw + idx % w; }
  __device__ bool real(std::int64_t b, std::int64_t j) const { return key_mask == nullptr || key_mask[b * len + j] != 0; }
  __device__ std::int64_t seg_begin(std::int64_t s) const { return s * seg_len; }
  __device__ std::int64_t seg_end(std::int64_t s) const { return (s + 1) * seg_len < len ? (s + 1) * seg_len : len; }
};

// The operand precision of products whose terms cancel: those of G = [dout / den, -(dout .
// out) / den] with [v, 1] or a state, where dout . v_j and dout . out_t nearly agree. bf16
// operands there lose the difference (the GPU's dk was off by 100% in a test), so bf16 calls
// carry them as two bf16 each (tile::SplitBF16).
template <class T>
using Precise = std::conditional_t<std::is_same_v<T, float>, float, tile::SplitBF16>;

// The row stride of an n-wide chunk matrix in shared memory: the smallest stride >= n that is
// 4 mod 8 floats. The block products' fragment loads read 8 rows at once (lanes g = 0..7):
// at a stride of 64 floats all 8 fall in the same bank (8-way conflicts); at 4 mod 8 they
// spread over the banks (at most 2 lanes per bank, none for column-major and n-major reads).
__host__ __device__ constexpr int padded_row(int n) { return n + (12 - n % 8) % 8; }
static_assert(padded_row(64) == 68 && padded_row(65) == 68 && padded_row(12) == 12 && padded_row(5) == 12);

// A(i, k) = p[i * row + k * col]: any transposition of a matrix in any memory.
template <class E>
__device__ __forceinline__ tile::StridedMat<E> mat(const E* p, int row, int col) {
  return tile::strided(p, row, col);
}

__device__ void block_zero(float* x, std::int64_t n) {
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = 0.0f;
}

// Given logits: q (B, T, Hq, m), k (B, T, Hkv, m).
template <class T>
struct GivenLogits {
  const T* q;
  const T* k;
  // Logits of rows [row0, row0 + n) of head `head` into out (n x m, row stride g.lm); x / norms
  // unused.
  __device__ void keys(const LaShape& g, std::int64_t b, std::int64_t kvh, std::int64_t row0, std::int64_t n, float* out,
                       float*, float*) const {
    for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) {
      const int r = idx / g.m, f = idx % g.m;
      out[r * g.lm + f] = static_cast<float>(k[((b * g.len + row0 + r) * g.hkv + kvh) * g.m + f]);
    }
  }
  __device__ void queries(const LaShape& g, std::int64_t b, std::int64_t h, std::int64_t row0, std::int64_t n, float* out,
                          float*, float*) const {
    for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) {
      const int r = idx / g.m, f = idx % g.m;
      out[r * g.lm + f] = static_cast<float>(q[((b * g.len + row0 + r) * g.hq + h) * g.m + f]);
    }
  }
};

// Shared memory of the key-max pass: one chunk's logits, x rows and norms.
std::size_t key_max_floats(const LaShape& g) {
  return static_cast<std::size_t>(g.chunk) * (g.lm + (g.r > 0 ? g.r : 1) + 1);
}

// rowmax[(b hkv + kv) T + j] = max_f logit_f(k_j), -inf for a padded key: one block per chunk
// of keys, whose logits come from the same source (and products) as in the chunk kernels.
template <class T, class Src>
__global__ void __launch_bounds__(kLaThreads, 1) la_key_max_kernel(Src src, LaShape g, float* rowmax) {
  DARK_DYNAMIC_SHARED(float, smem);
  float* logits = smem;
  float* xs = logits + g.chunk * g.lm;
  float* half_norm = xs + g.chunk * (g.r > 0 ? g.r : 1);
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * g.chunk, bkv = blockIdx.y;
  const std::int64_t b = bkv / g.hkv, kvh = bkv % g.hkv;
  const int n = g.len - c0 < g.chunk ? static_cast<int>(g.len - c0) : g.chunk;
  src.keys(g, b, kvh, c0, n, logits, xs, half_norm);
  __syncthreads();
  const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
  for (int r = threadIdx.x / 32; r < n; r += warps) {
    float mx = kNegInf;
    for (int f = lane; f < g.m; f += 32) mx = fmaxf(mx, logits[r * g.lm + f]);
#pragma unroll
    for (int delta = 16; delta > 0; delta >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, delta));
    if (lane == 0) rowmax[bkv * g.len + c0 + r] = g.real(b, c0 + r) ? mx : kNegInf;
  }
}

// Launches the key-max pass over every chunk of keys of every (batch, kv head) into rowmax.
template <class T, class Src>
void launch_key_max(const Src& src, const LaShape& g, float* rowmax) {
  const std::size_t bytes = key_max_floats(g) * sizeof(float);
  allow_dynamic_shared(la_key_max_kernel<T, Src>, bytes);
  launch(la_key_max_kernel<T, Src>,
         {dim3(static_cast<unsigned>((g.len + g.chunk - 1) / g.chunk), static_cast<unsigned>(g.batch * g.hkv)),
          kLaThreads, bytes},
         src, g, rowmax);
}

// Shared-memory layout of one chunk (C rows): every kernel uses the parts it needs. Rows of
// the m-, w- and C-wide matrices are padded_row(m), (w), (C) floats apart (LaShape::lm, lw,
// lc); elementwise loops walk n x m densely and index through LaShape::at_m / at_w.
struct ChunkSmem {
  float *e, *vx, *phi, *p, *dec, *y, *gm, *dphi, *de, *dvx, *xs, *half_norm, *oc;
  float* qoff;  // the loaded queries' offsets (max logit), for log_norm
  int* is_real;

  __host__ __device__ static std::size_t floats(std::int64_t c, std::int64_t m, std::int64_t w, std::int64_t r) {
    const std::int64_t lm = padded_row(static_cast<int>(m)), lw = padded_row(static_cast<int>(w));
    return static_cast<std::size_t>(4 * c * lm + 4 * c * lw + 2 * c * padded_row(static_cast<int>(c)) +
                                    c * (r > 0 ? r : 1) + 4 * c);
  }
  __device__ static ChunkSmem carve(float* base, std::int64_t c, std::int64_t m, std::int64_t w, std::int64_t r) {
    ChunkSmem s;
    float* p = base;
    auto take = [&](std::int64_t n) {
      float* q = p;
      p += n;
      return q;
    };
    const std::int64_t lm = padded_row(static_cast<int>(m)), lw = padded_row(static_cast<int>(w));
    const std::int64_t lc = padded_row(static_cast<int>(c));
    s.e = take(c * lm), s.phi = take(c * lm), s.dphi = take(c * lm), s.de = take(c * lm);
    s.vx = take(c * lw), s.y = take(c * lw), s.gm = take(c * lw), s.dvx = take(c * lw);
    s.p = take(c * lc), s.dec = take(c * lc);
    s.xs = take(c * (r > 0 ? r : 1));
    s.half_norm = take(c), s.oc = take(c), s.qoff = take(c);
    s.is_real = reinterpret_cast<int*>(take(c));
    return s;
  }
};

// Keys of rows [c0, c0 + n): offsets oc, is_real, E = exp(logit - rel) for real rows (rel =
// each row's own offset, or `fixed` when use_fixed), 0 otherwise; Vx = [v, 1] or 0.
template <class T, class Src>
__device__ void load_keys(const LaShape& g, const Src& src, const T* v, const float* o, std::int64_t b, std::int64_t kvh,
                          std::int64_t c0, std::int64_t n, const ChunkSmem& s, bool use_fixed, float fixed) {
  __syncthreads();  // every reader of the previous chunk's keys and offsets is done
  const float* ob = o + (b * g.hkv + kvh) * g.len;
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    s.oc[r] = ob[c0 + r];
    s.is_real[r] = g.real(b, c0 + r) ? 1 : 0;
  }
  src.keys(g, b, kvh, c0, n, s.e, s.xs, s.half_norm);
  __syncthreads();
  for (int idx = threadIdx.x; idx < n * g.m; idx += blockDim.x) {
    const int r = idx / g.m;
    s.e[g.at_m(idx)] = s.is_real[r] ? expf(s.e[g.at_m(idx)] - (use_fixed ? fixed : s.oc[r])) : 0.0f;
  }
  for (int idx = threadIdx.x; idx < n * g.w; idx += blockDim.x) {
    const int r = idx / g.w, c = idx % g.w;
    float x = 0.0f;
    if (s.is_real[r]) x = c < g.dv ? static_cast<float>(v[((b * g.len + c0 + r) * g.hkv + kvh) * g.dv + c]) : 1.0f;
    s.vx[g.at_w(idx)] = x;
  }
  __syncthreads();
}

// Phi (n x m) of query head h: exp(logit - the row's max logit), that max into s.qoff. One warp
// per row for the max.
template <class Src>
__device__ void load_queries(const LaShape& g, const Src& src, std::int64_t b, std::int64_t h, std::int64_t c0,
                             std::int64_t n, const ChunkSmem& s) {
  __syncthreads();  // every reader of the previous Phi (and x scratch) is done
  src.queries(g, b, h, c0, n, s.phi, s.xs, s.half_norm);
  __syncthreads();
  const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
  for (std::int64_t r = threadIdx.x / 32; r < n; r += warps) {
    float mx = kNegInf;
    for (std::int64_t f = lane; f < g.m; f += 32) mx = fmaxf(mx, s.phi[r * g.lm + f]);
#pragma unroll
    for (int delta = 16; delta > 0; delta >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, delta));
    for (std::int64_t f = lane; f < g.m; f += 32) s.phi[r * g.lm + f] = expf(s.phi[r * g.lm + f] - mx);
    if (lane == 0) s.qoff[r] = mx;
  }
  __syncthreads();
}

// G (n x W) of query head h: [dout / den, (-(dout . out) + dlog_norm) / den] (dlog_norm: 0 when
// not given), 0 for rows that see no key (their offset in o_rows, n floats, is -inf).
template <class T>
__device__ void load_grads(const LaShape& g, const T* out, const T* den, const T* dout, std::int64_t b, std::int64_t h,
                           std::int64_t c0, std::int64_t n, const float* o_rows, const ChunkSmem& s) {
  __syncthreads();  // every reader of the previous G is done
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    float* gr = s.gm + r * g.lw;
    if (o_rows[r] == kNegInf) {
      for (std::int64_t j = 0; j < g.w; ++j) gr[j] = 0.0f;
      continue;
    }
    const std::int64_t at = ((b * g.len + c0 + r) * g.hq + h) * g.dv;
    const std::int64_t row = (b * g.hq + h) * g.len + c0 + r;
    const float inv = 1.0f / static_cast<float>(den[row]);
    float dot = 0.0f;
    for (std::int64_t j = 0; j < g.dv; ++j) {
      const float d = static_cast<float>(dout[at + j]);
      gr[j] = d * inv;
      dot += d * static_cast<float>(out[at + j]);
    }
    gr[g.dv] = g.dlog_norm ? (-dot + g.dlog_norm[row]) * inv : -dot * inv;
  }
  __syncthreads();
}

// p (rows x cols, leading dimension ld) *= the weights of the chunk pair in s.dec (same
// layout): the causal decay of one chunk (build_decay), or a window's weights.
__device__ void apply_weights(float* p, int rows, int cols, int ld, const ChunkSmem& s) {
  __syncthreads();
  for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x) {
    const int at = (idx / cols) * ld + idx % cols;
    p[at] *= s.dec[at];
  }
  __syncthreads();
}

// A row's log normaliser from the forward's final loop: log(den') in offset-scaled units plus
// the query's and the keys' offsets (qoff, o); -inf where the row sees no key (o = -inf).
__device__ float log_normaliser(float qoff, float o, float den) {
  return o == kNegInf ? kNegInf : qoff + o + logf(den);
}

// The data of an optional per-row f32 tensor (log_norm, dlog_norm: shaped like den), nullptr
// when undefined; `op` and `name` name it in the error.
inline float* row_stat(const Tensor& t, const Tensor& den, const char* op, const char* name) {
  if (!t.defined()) return nullptr;
  DARK_CHECK(t.dtype() == DType::f32 && t.shape() == den.shape() && t.is_contiguous(), op, ": ", name, " ",
             t.describe(), " must be f32, contiguous and shaped like den ", den.describe());
  return t.data<float>();
}

// The chunk length of a call: the largest of 64, 32, 16, 8 that is at most the requested one
// (8 at least) and whose shared memory, floats(c) floats, fits in `optin` bytes; 0 if none does.
template <class Floats>
int pick_chunk(std::int64_t requested, int optin, Floats&& floats) {
  for (const int c : {64, 32, 16, 8})
    if ((c <= requested || c == 8) && floats(c) * sizeof(float) <= static_cast<std::size_t>(optin)) return c;
  return 0;
}

}  // namespace
}  // namespace dark::cuda
