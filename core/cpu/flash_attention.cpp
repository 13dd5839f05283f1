// CPU flash attention for grouped-query heads, forward and backward.
//
// Forward (FlashAttention-2): one task per (batch, query head, tile of fwd_q queries; see
// Tiles). It walks the tiles of fwd_k keys the queries can see, keeps a running row max m,
// row sum l and unnormalised output (online softmax), and at the end writes
// out = acc / l and lse = m + log(l). Per thread only O(fwd_q * (fwd_k + D)) scratch.
// Padded keys (key mask 0) get score -inf in every tile, so they carry no probability; the
// tile geometry stays that of the unmasked call (an all-ones mask changes no bit).
// Sliding window (window > 0, causal): query t also loses the keys s <= t + S - T - window.
// Key tiles wholly before every query's window are never visited (forward and backward
// walk only the tiles between the first window start and the causal end: O(T window) work;
// a window of at most 256 keys covers each tile's band in one span, see Tiles); in a tile
// that straddles a row's window start, the keys before it get score -inf like padded keys.
// window >= S is window 0 (the same tiles, the same bits).
//
// Backward: D_i = rowsum(dO * O) (minus lse's gradient where the op returns lse) first;
// then, tile pair by tile pair, P = exp(S - lse) is recomputed and
//   dV += P^T dO,  dS = P * (dO V^T - D_i),  dK += scale dS^T Q,  dQ += scale dS K.
// Each of dK, dV (per key tile) and dQ (per query tile) is owned by one task at a time and
// accumulated in a fixed order (see use_fused_schedule for the two schedules, which do the
// same arithmetic, and span_backward for short windows). Nothing is atomic, so the result
// is bitwise the same for any number of threads. Extra memory: D_i (B, Hq, T) and per-thread tiles. A padded key has P = 0,
// hence dS = 0: its dK and dV rows stay exactly 0.
//
// Matrix products on tiles go to oneDNN's sgemm (float32; single-threaded inside our
// parallel region) or a plain loop (float64, used for gradchecks). The tile loops over
// float32 rows are compiled for several instruction sets (as in core/cpu/elementwise.cpp).
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
#include "core/cpu/tile_gemm.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

#define DARK_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

// Tile sizes (queries x keys). Full causal (or bidirectional) attention walks an aligned grid,
// tuned on AVX-512 with D = 64: the forward favours wide key tiles, the backward tall query
// tiles. A short sliding window instead covers each tile's whole band in one product
// ("spans"): the forward's fwd_q queries take their fwd_q + window - 1 keys at once (starting
// at the first one's window, not on a grid), the backward's bwd_k keys the bwd_k + window - 1
// queries that see them (span_backward). A short window's grid is mostly cells outside the
// band and per-call overhead (W = 64, L = 8192, 4 heads, 2 threads: 49 -> 31 ms).
struct Tiles {
  std::int64_t fwd_q, fwd_k, bwd_q, bwd_k;
  bool spans;  // sliding window: one span per tile (above), no grid
  std::int64_t p_rows, p_cols;  // the backward's P / dS scratch (row stride p_cols)
};
inline Tiles tiles_for(std::int64_t window) {
  // Longer windows keep the grid: its cells are mostly inside the band, and a span's scratch
  // grows as the window squared.
  if (window == 0 || window > 256) return {64, 128, 128, 64, false, 128, 64};
  constexpr std::int64_t q = 32;  // 16 times the same, 64 is 1.2x slower (W = 64, AVX-512)
  return {q, q + window - 1, q, q, true, q + window - 1, q + window - 1};
}

// Shapes, strides, the causal geometry and the key padding mask of one call.
struct Geometry {
  std::int64_t batch, t, s, hq, hkv, d, group;
  std::int64_t q_strides[3], k_strides[3], v_strides[3];  // batch, sequence, head (D has stride 1)
  bool causal;
  Tiles tiles;
  std::int64_t window;           // > 0: sliding window (causal only); 0: none (also for window >= S)
  const std::int32_t* key_mask;  // (B, S), 0 = padded key; nullptr: every key is real

  Geometry(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask_, bool causal_,
           std::int64_t window_)
      : batch(q.shape()[0]), t(q.shape()[1]), s(k.shape()[1]), hq(q.shape()[2]), hkv(k.shape()[2]),
        d(q.shape()[3]), group(q.shape()[2] / k.shape()[2]), causal(causal_),
        tiles(tiles_for(window_ < s ? window_ : 0)), window(window_ < s ? window_ : 0),
        key_mask(key_mask_.defined() ? key_mask_.data<std::int32_t>() : nullptr) {
    DARK_CHECK(window_ >= 0 && (window_ == 0 || causal_), "flash_attention: window must be >= 0 and needs causal, got ",
               window_, causal_ ? " (causal)" : " (not causal)");
    for (int i = 0; i < 3; ++i) {
      q_strides[i] = q.stride(i);
      k_strides[i] = k.stride(i);
      v_strides[i] = v.stride(i);
    }
  }
  // Keys [0, key_end(t)) are visible to query t (may be <= 0: none).
  std::int64_t key_end(std::int64_t tq) const { return causal ? std::min(s, tq + (s - t) + 1) : s; }
  // The first key visible to query t (keys before it are outside its window).
  std::int64_t key_begin(std::int64_t tq) const {
    return window > 0 ? std::max<std::int64_t>(0, tq + (s - t) - window + 1) : 0;
  }
  // The first query that sees key sk.
  std::int64_t query_begin(std::int64_t sk) const { return causal ? std::max<std::int64_t>(0, sk - (s - t)) : 0; }
  // One past the last query that sees key sk (its window has moved past sk after that).
  std::int64_t query_end(std::int64_t sk) const {
    return window > 0 ? std::clamp<std::int64_t>(sk - (s - t) + window, 0, t) : t;
  }
};

template <class T>
T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

// ---- row loops on tiles (row stride ld) ----

// Online-softmax update of rows [0, rows) of the score tile: row r has visible[r] leading
// valid columns of cols. Turns scores into exp(score - new max) (0 where masked), updates
// m and l, and returns in alpha[r] the factor the accumulated output row must be scaled by.
template <class T>
DARK_INLINE void online_softmax_rows(T* tile, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                     const std::int64_t* visible, T* m, T* l, T* alpha) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = tile + r * ld;
    const std::int64_t n = visible[r];
    T mx = neg_inf<T>();
#pragma omp simd reduction(max : mx)
    for (std::int64_t c = 0; c < n; ++c) mx = row[c] > mx ? row[c] : mx;
    const T m_new = mx > m[r] ? mx : m[r];
    if (m_new == neg_inf<T>()) {  // nothing visible yet
      for (std::int64_t c = 0; c < cols; ++c) row[c] = 0;
      alpha[r] = 1;
      continue;
    }
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t c = 0; c < n; ++c) {
      const T p = vmath::exp(row[c] - m_new);
      row[c] = p;
      sum += p;
    }
    for (std::int64_t c = n; c < cols; ++c) row[c] = 0;
    alpha[r] = m[r] == neg_inf<T>() ? T(0) : vmath::exp(m[r] - m_new);
    l[r] = l[r] * alpha[r] + sum;
    m[r] = m_new;
  }
}

// P = exp(S - lse) on the visible columns, 0 elsewhere. A row that saw no real key
// (lse = -inf; its visible scores, if any, are padded keys' -inf) is all 0.
template <class T>
DARK_INLINE void probabilities_rows(T* tile, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                    const std::int64_t* visible, const T* lse) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = tile + r * ld;
    const T shift = lse[r];
    const std::int64_t n = shift == neg_inf<T>() ? 0 : visible[r];
#pragma omp simd
    for (std::int64_t c = 0; c < n; ++c) row[c] = vmath::exp(row[c] - shift);
    for (std::int64_t c = n; c < cols; ++c) row[c] = 0;
  }
}

// dS = P * (dP - D_i), written over dP.
template <class T>
DARK_INLINE void score_grad_rows(const T* p, T* dp, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                 const T* di) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* pr = p + r * ld;
    T* dr = dp + r * ld;
    const T dd = di[r];
#pragma omp simd
    for (std::int64_t c = 0; c < cols; ++c) dr[c] = pr[c] * (dr[c] - dd);
  }
}

DARK_CPU_CLONES void online_softmax_rows_f32(float* tile, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                             const std::int64_t* visible, float* m, float* l, float* alpha) {
  online_softmax_rows(tile, ld, rows, cols, visible, m, l, alpha);
}
DARK_CPU_CLONES void probabilities_rows_f32(float* tile, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                            const std::int64_t* visible, const float* lse) {
  probabilities_rows(tile, ld, rows, cols, visible, lse);
}
DARK_CPU_CLONES void score_grad_rows_f32(const float* p, float* dp, std::int64_t ld, std::int64_t rows,
                                         std::int64_t cols, const float* di) {
  score_grad_rows(p, dp, ld, rows, cols, di);
}

template <class T>
void online_softmax(T* tile, std::int64_t ld, std::int64_t rows, std::int64_t cols, const std::int64_t* visible, T* m,
                    T* l, T* alpha) {
  if constexpr (std::is_same_v<T, float>) online_softmax_rows_f32(tile, ld, rows, cols, visible, m, l, alpha);
  else online_softmax_rows(tile, ld, rows, cols, visible, m, l, alpha);
}
template <class T>
void probabilities(T* tile, std::int64_t ld, std::int64_t rows, std::int64_t cols, const std::int64_t* visible,
                   const T* lse) {
  if constexpr (std::is_same_v<T, float>) probabilities_rows_f32(tile, ld, rows, cols, visible, lse);
  else probabilities_rows(tile, ld, rows, cols, visible, lse);
}
template <class T>
void score_grad(const T* p, T* dp, std::int64_t ld, std::int64_t rows, std::int64_t cols, const T* di) {
  if constexpr (std::is_same_v<T, float>) score_grad_rows_f32(p, dp, ld, rows, cols, di);
  else score_grad_rows(p, dp, ld, rows, cols, di);
}

// Number of visible columns of key block [s0, s0 + cols) for queries t0 .. t0 + rows - 1.
void visible_columns(const Geometry& g, std::int64_t t0, std::int64_t rows, std::int64_t s0, std::int64_t cols,
                     std::int64_t* visible) {
  for (std::int64_t r = 0; r < rows; ++r)
    visible[r] = std::clamp<std::int64_t>(g.key_end(t0 + r) - s0, 0, cols);
}

// Scores of keys before each row's window start in the tile of key block [s0, s0 + cols)
// for queries t0 .. t0 + rows - 1 become -inf (nothing without a window).
template <class T>
void mask_before_window(const Geometry& g, std::int64_t t0, std::int64_t rows, std::int64_t s0, std::int64_t cols,
                        T* tile, std::int64_t ld) {
  if (g.window == 0) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t hidden = std::clamp<std::int64_t>(g.key_begin(t0 + r) - s0, 0, cols);
    std::fill(tile + r * ld, tile + r * ld + hidden, neg_inf<T>());
  }
}

// Scores of padded keys in the tile of key block [s0, s0 + cols) of batch b become -inf.
template <class T>
void mask_padded_keys(const Geometry& g, std::int64_t b, std::int64_t s0, T* tile, std::int64_t ld, std::int64_t rows,
                      std::int64_t cols) {
  if (g.key_mask == nullptr) return;
  const std::int32_t* real = g.key_mask + b * g.s + s0;
  for (std::int64_t c = 0; c < cols; ++c)
    if (real[c] == 0)
      for (std::int64_t r = 0; r < rows; ++r) tile[r * ld + c] = neg_inf<T>();
}

// Runs task(i, scratch) for i in [0, n) on the OpenMP threads, each with its own scratch.
// Dynamic scheduling balances causal tiles of unequal cost; every task writes disjoint
// outputs in a fixed order, so the schedule never changes a result. Inside, the thread
// count ICV is set to 1 so that oneDNN's sgemm always runs single-threaded (the same
// arithmetic whatever the team size). Returns false if any task failed; an exception from
// make_scratch or a task is rethrown here, after the region (see RegionErrors).
template <class Scratch, class MakeScratch, class Task>
bool run_tasks(std::int64_t n, MakeScratch&& make_scratch, Task&& task) {
  if (n <= 0) return true;
  std::atomic<bool> ok{true};
  RegionErrors errors;
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), n));
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);  // this thread's nested regions only
    // Ordered before every task: if it fails, all tasks are skipped, but each thread still
    // reaches the worksharing loop, as OpenMP requires.
    std::optional<Scratch> scratch;
    errors.run(-1, [&] { scratch.emplace(make_scratch()); });
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n; ++i)
      errors.run(i, [&] {
        if (ok.load(std::memory_order_relaxed) && !task(i, *scratch)) ok.store(false, std::memory_order_relaxed);
      });
  }
  errors.rethrow();
  return ok.load();
}

// A 64-byte aligned scratch array (tiles get the same alignment in every task).
template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n)
      : data_(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64))) {
    DARK_CHECK(data_ != nullptr, "flash_attention: cannot allocate ", n * sizeof(T), " bytes of scratch");
  }
  T* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], Free> data_;
};

template <class T>
struct ForwardScratch {
  AlignedBuffer<T> tile, acc;
  std::vector<T> m, l, alpha;
  std::vector<std::int64_t> visible;
};

template <class T>
void flash_attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    Tensor& out, Tensor& lse, bool causal, double scale_d, std::int64_t window) {
  const Geometry g(q, k, v, key_mask, causal, window);
  const T scale = static_cast<T>(scale_d);
  const T* pq = q.data<T>();
  const T* pk = k.data<T>();
  const T* pv = v.data<T>();
  T* po = out.data<T>();
  T* plse = lse.data<T>();
  const std::int64_t q_blocks = (g.t + g.tiles.fwd_q - 1) / g.tiles.fwd_q;
  const std::int64_t d = g.d;
  auto make_scratch = [&] {
    ForwardScratch<T> s;
    s.tile = AlignedBuffer<T>(g.tiles.fwd_q * g.tiles.fwd_k);
    s.acc = AlignedBuffer<T>(g.tiles.fwd_q * d);
    s.m.resize(g.tiles.fwd_q);
    s.l.resize(g.tiles.fwd_q);
    s.alpha.resize(g.tiles.fwd_q);
    s.visible.resize(g.tiles.fwd_q);
    return s;
  };
  auto task = [&](std::int64_t i, ForwardScratch<T>& s) {
    const std::int64_t qb = i % q_blocks, h = (i / q_blocks) % g.hq, b = i / (q_blocks * g.hq);
    const std::int64_t kv = h / g.group;
    const std::int64_t t0 = qb * g.tiles.fwd_q, rows = std::min(g.t, t0 + g.tiles.fwd_q) - t0;
    const T* qt = pq + b * g.q_strides[0] + t0 * g.q_strides[1] + h * g.q_strides[2];
    const T* kh = pk + b * g.k_strides[0] + kv * g.k_strides[2];
    const T* vh = pv + b * g.v_strides[0] + kv * g.v_strides[2];
    std::fill(s.m.begin(), s.m.begin() + rows, neg_inf<T>());
    std::fill(s.l.begin(), s.l.begin() + rows, T(0));
    std::fill(s.acc.data(), s.acc.data() + rows * d, T(0));
    const std::int64_t key_end = std::max<std::int64_t>(0, g.key_end(t0 + rows - 1));
    const std::int64_t first = g.tiles.spans ? g.key_begin(t0) : g.key_begin(t0) / g.tiles.fwd_k * g.tiles.fwd_k;
    for (std::int64_t s0 = first; s0 < key_end; s0 += g.tiles.fwd_k) {
      const std::int64_t cols = std::min(key_end, s0 + g.tiles.fwd_k) - s0;
      if (!gemm('N', 'T', rows, cols, d, scale, qt, g.q_strides[1], kh + s0 * g.k_strides[1], g.k_strides[1], T(0),
                s.tile.data(), g.tiles.fwd_k))
        return false;
      mask_before_window(g, t0, rows, s0, cols, s.tile.data(), g.tiles.fwd_k);
      mask_padded_keys(g, b, s0, s.tile.data(), g.tiles.fwd_k, rows, cols);
      visible_columns(g, t0, rows, s0, cols, s.visible.data());
      online_softmax(s.tile.data(), g.tiles.fwd_k, rows, cols, s.visible.data(), s.m.data(), s.l.data(), s.alpha.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        const T a = s.alpha[r];
        if (a == T(1)) continue;
        T* acc = s.acc.data() + r * d;
#pragma omp simd
        for (std::int64_t j = 0; j < d; ++j) acc[j] *= a;
      }
      if (!gemm('N', 'N', rows, d, cols, T(1), s.tile.data(), g.tiles.fwd_k, vh + s0 * g.v_strides[1], g.v_strides[1],
                T(1), s.acc.data(), d))
        return false;
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      T* o = po + ((b * g.t + t0 + r) * g.hq + h) * d;
      const T* acc = s.acc.data() + r * d;
      T& row_lse = plse[(b * g.hq + h) * g.t + t0 + r];
      if (s.l[r] > T(0)) {
        const T inv = T(1) / s.l[r];
#pragma omp simd
        for (std::int64_t j = 0; j < d; ++j) o[j] = acc[j] * inv;
        row_lse = s.m[r] + vmath::log(s.l[r]);
      } else {  // the row sees no real key
        std::fill(o, o + d, T(0));
        row_lse = neg_inf<T>();
      }
    }
    return true;
  };
  const bool ok = run_tasks<ForwardScratch<T>>(g.batch * g.hq * q_blocks, make_scratch, task);
  DARK_CHECK(ok, "flash_attention: dnnl_sgemm failed on a tile (D = ", d, ")");
}

template <class T>
struct BackwardScratch {
  AlignedBuffer<T> p, ds;
  std::vector<std::int64_t> visible;
};

// Everything a backward tile step reads.
template <class T>
struct BackwardArgs {
  const Geometry* g;
  T scale;
  const T *q, *k, *v, *lse, *di, *dout;
  T *dq, *dk, *dv;
  bool accumulate;  // dq, dk, dv hold gradients to add to (not zeroed first)
};

// A backward tile: queries [t0, t0 + rows) against keys [s0, s0 + cols).
struct Tile {
  std::int64_t t0, rows, s0, cols;
};

// The grid's tile of query tile t0 and key tile s0 (clipped at the ends).
Tile grid_tile(const Geometry& g, std::int64_t t0, std::int64_t s0) {
  return {t0, std::min(g.t, t0 + g.tiles.bwd_q) - t0, s0, std::min(g.s, s0 + g.tiles.bwd_k) - s0};
}

// One (query tile of head h, key tile of kv head) step: P = exp(scale Q K^T - lse) into
// s.p and dS = P * (dO V^T - D_i) into s.ds; with want_dkv also dV += P^T dO and
// dK += scale dS^T Q into the key tile's rows of dk and dv.
template <class T>
bool backward_tile(const BackwardArgs<T>& a, std::int64_t b, std::int64_t h, const Tile& tile, bool want_dkv,
                   BackwardScratch<T>& s) {
  const Geometry& g = *a.g;
  const std::int64_t d = g.d, kv = h / g.group, ld = g.tiles.p_cols;
  const std::int64_t t0 = tile.t0, s0 = tile.s0, rows = tile.rows, cols = tile.cols;
  const T* qt = a.q + b * g.q_strides[0] + t0 * g.q_strides[1] + h * g.q_strides[2];
  const T* kt = a.k + b * g.k_strides[0] + s0 * g.k_strides[1] + kv * g.k_strides[2];
  const T* vt = a.v + b * g.v_strides[0] + s0 * g.v_strides[1] + kv * g.v_strides[2];
  const T* dot = a.dout + ((b * g.t + t0) * g.hq + h) * d;
  const std::int64_t ldo = g.hq * d, ldkv = g.hkv * d;
  if (!gemm('N', 'T', rows, cols, d, a.scale, qt, g.q_strides[1], kt, g.k_strides[1], T(0), s.p.data(), ld))
    return false;
  mask_before_window(g, t0, rows, s0, cols, s.p.data(), ld);
  mask_padded_keys(g, b, s0, s.p.data(), ld, rows, cols);
  visible_columns(g, t0, rows, s0, cols, s.visible.data());
  probabilities(s.p.data(), ld, rows, cols, s.visible.data(), a.lse + (b * g.hq + h) * g.t + t0);
  if (want_dkv &&
      !gemm('T', 'N', cols, d, rows, T(1), s.p.data(), ld, dot, ldo, T(1),
            a.dv + ((b * g.s + s0) * g.hkv + kv) * d, ldkv))
    return false;
  if (!gemm('N', 'T', rows, cols, d, T(1), dot, ldo, vt, g.v_strides[1], T(0), s.ds.data(), ld)) return false;
  score_grad(s.p.data(), s.ds.data(), ld, rows, cols, a.di + (b * g.hq + h) * g.t + t0);
  if (want_dkv &&
      !gemm('T', 'N', cols, d, rows, a.scale, s.ds.data(), ld, qt, g.q_strides[1], T(1),
            a.dk + ((b * g.s + s0) * g.hkv + kv) * d, ldkv))
    return false;
  return true;
}

// Rows [r0, r1) of the tile's dS times scale K (its keys, head h's kv head) added into dst
// (row stride ld): the dQ contribution of those queries.
template <class T>
bool add_tile_dq_rows(const BackwardArgs<T>& a, std::int64_t b, std::int64_t h, const Tile& tile,
                      const BackwardScratch<T>& s, std::int64_t r0, std::int64_t r1, T* dst, std::int64_t ld) {
  const Geometry& g = *a.g;
  const std::int64_t kv = h / g.group, lp = g.tiles.p_cols;
  const T* kt = a.k + b * g.k_strides[0] + tile.s0 * g.k_strides[1] + kv * g.k_strides[2];
  return r1 <= r0 ||
         gemm('N', 'N', r1 - r0, g.d, tile.cols, a.scale, s.ds.data() + r0 * lp, lp, kt, g.k_strides[1], T(1), dst, ld);
}

// dQ rows of the tile's queries (head h) += scale dS K with the tile's keys.
template <class T>
bool backward_tile_dq(const BackwardArgs<T>& a, std::int64_t b, std::int64_t h, const Tile& tile,
                      BackwardScratch<T>& s) {
  const Geometry& g = *a.g;
  return add_tile_dq_rows(a, b, h, tile, s, 0, tile.rows, a.dq + ((b * g.t + tile.t0) * g.hq + h) * g.d, g.hq * g.d);
}

// The backward of a short sliding window (Tiles::spans): one task per (b, kv head, segment of
// kSpanSegment keys) walks the segment's key tiles in order; each tile's band of queries is
// one product set (P, dS, dV, dK, dQ: 5 products), so dK and dV are the task's own rows. A
// band's dQ rows past the segment's own queries (those that first see the next segment) go
// to the task's spill rows, added after every task has finished: each dQ row is summed in
// one fixed order, and the segments do not depend on the thread count.
constexpr std::int64_t kSpanSegment = 1024;

template <class T, class MakeScratch>
bool span_backward(const BackwardArgs<T>& a, MakeScratch&& make_scratch) {
  const Geometry& g = *a.g;
  const std::int64_t d = g.d, bk = g.tiles.bwd_k, ldq = g.hq * d;
  const std::int64_t segments = (g.s + kSpanSegment - 1) / kSpanSegment, tasks = g.batch * g.hkv * segments;
  const std::int64_t spill_rows = std::max<std::int64_t>(1, g.window - 1);  // query_end(S1 - 1) - query_begin(S1)
  std::vector<T> spill(static_cast<std::size_t>(tasks * g.group * spill_rows * d), T(0));
  // Queries [own_begin(S), own_begin(S')) are those that first see segment S's keys.
  auto own_begin = [&](std::int64_t key) { return key >= g.s ? g.t : std::max<std::int64_t>(0, g.query_begin(key)); };
  auto task = [&](std::int64_t i, BackwardScratch<T>& s) {
    const std::int64_t seg = i % segments, kv = i / segments % g.hkv, b = i / (segments * g.hkv);
    const std::int64_t k0 = seg * kSpanSegment, k1 = std::min(g.s, k0 + kSpanSegment), own_end = own_begin(k1);
    for (std::int64_t s0 = k0; s0 < k1; s0 += bk) {
      zero_key_tile(a, b, kv, s0);
      const std::int64_t cols = std::min(k1, s0 + bk) - s0;
      const std::int64_t t0 = std::max<std::int64_t>(0, g.query_begin(s0)), t_end = g.query_end(s0 + cols - 1);
      if (t0 >= t_end) continue;
      const Tile tile{t0, t_end - t0, s0, cols};
      for (std::int64_t h = kv * g.group; h < (kv + 1) * g.group; ++h) {
        T* spill_h = spill.data() + ((i * g.group + h - kv * g.group) * spill_rows) * d;
        const std::int64_t split = std::clamp(own_end, t0, t_end) - t0;
        if (!backward_tile(a, b, h, tile, true, s) ||
            !add_tile_dq_rows(a, b, h, tile, s, 0, split, a.dq + ((b * g.t + t0) * g.hq + h) * d, ldq) ||
            !add_tile_dq_rows(a, b, h, tile, s, split, tile.rows, spill_h + (t0 + split - own_end) * d, d))
          return false;
      }
    }
    return true;
  };
  if (!run_tasks<BackwardScratch<T>>(tasks, make_scratch, task)) return false;
  parallel_for(g.batch * g.hq, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bh = begin; bh < end; ++bh) {
      const std::int64_t b = bh / g.hq, h = bh % g.hq, kv = h / g.group;
      for (std::int64_t seg = 0; seg + 1 < segments; ++seg) {
        const std::int64_t i = (b * g.hkv + kv) * segments + seg, own_end = own_begin((seg + 1) * kSpanSegment);
        const T* spill_h = spill.data() + ((i * g.group + h - kv * g.group) * spill_rows) * d;
        for (std::int64_t r = 0; r < spill_rows && own_end + r < g.t; ++r) {
          T* dq = a.dq + ((b * g.t + own_end + r) * g.hq + h) * d;
          const T* sp = spill_h + r * d;
#pragma omp simd
          for (std::int64_t j = 0; j < d; ++j) dq[j] += sp[j];
        }
      }
    }
  });
  return true;
}

// Zeroes the dk and dv rows of key tile s0 of (b, kv) (unless accumulating).
template <class T>
void zero_key_tile(const BackwardArgs<T>& a, std::int64_t b, std::int64_t kv, std::int64_t s0) {
  if (a.accumulate) return;
  const Geometry& g = *a.g;
  const std::int64_t cols = std::min(g.s, s0 + g.tiles.bwd_k) - s0, ldkv = g.hkv * g.d;
  T* dk = a.dk + ((b * g.s + s0) * g.hkv + kv) * g.d;
  T* dv = a.dv + ((b * g.s + s0) * g.hkv + kv) * g.d;
  for (std::int64_t r = 0; r < cols; ++r) {
    std::fill(dk + r * ldkv, dk + r * ldkv + g.d, T(0));
    std::fill(dv + r * ldkv, dv + r * ldkv + g.d, T(0));
  }
}

// The backward runs one of two schedules with identical arithmetic (the same tile
// products, each output accumulated in the same order), so the choice never changes a bit:
//  - fused: one task per (b, kv head) sweeps key tiles (outer), its query heads and their
//    query tiles, and accumulates dK, dV and dQ in one pass (5 tile products per tile pair);
//  - split: tasks per (b, kv head, key tile) accumulate dK and dV, then tasks per (b, query
//    head, query tile) recompute P and dS and accumulate dQ over the key tiles in order
//    (7 products per tile pair, but B * Hq * T / bwd_q parallel tasks).
// fused is used when there are enough (b, kv head) tasks to keep the threads evenly busy.
bool use_fused_schedule(const Geometry& g) {
  const std::int64_t tasks = g.batch * g.hkv;
  const std::int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const std::int64_t rounds = (tasks + threads - 1) / threads;
  return 4 * tasks >= 3 * rounds * threads;  // thread utilisation >= 75% (split costs ~1.4x)
}

template <class T>
void flash_attention_backward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                     const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dlse,
                                     Tensor& dq, Tensor& dk, Tensor& dv, bool causal, double scale_d,
                                     std::int64_t window, bool accumulate) {
  const Geometry g(q, k, v, key_mask, causal, window);
  const std::int64_t d = g.d;
  const T* po = out.data<T>();
  const T* pdo = dout.data<T>();

  // D_i = rowsum(dO * O) - dlse_i, laid out like lse: (B, Hq, T). (d lse_i / d s_ij = P_ij, so
  // lse's gradient joins dP's: dS = P (dP - rowsum(dO O) + dlse).)
  Tensor di = Tensor::empty(lse.shape(), lse.dtype(), lse.device());
  T* pdi = di.data<T>();
  const T* pdlse = dlse.defined() ? dlse.data<T>() : nullptr;
  const std::int64_t rows_total = g.batch * g.t * g.hq;
  parallel_for(rows_total, std::max<std::int64_t>(1, kGrainCheap / d), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {  // row = (b * T + t) * Hq + h
      const T* o = po + row * d;
      const T* dor = pdo + row * d;
      T acc = 0;
#pragma omp simd reduction(+ : acc)
      for (std::int64_t j = 0; j < d; ++j) acc += o[j] * dor[j];
      const std::int64_t h = row % g.hq, bt = row / g.hq, at = (bt / g.t * g.hq + h) * g.t + bt % g.t;
      pdi[at] = pdlse ? acc - pdlse[at] : acc;
    }
  });

  if (!accumulate) dq.fill_(0.0);
  const BackwardArgs<T> a{&g, static_cast<T>(scale_d), q.data<T>(), k.data<T>(), v.data<T>(), lse.data<T>(), pdi, pdo,
                          dq.data<T>(), dk.data<T>(), dv.data<T>(), accumulate};
  const Tiles& tl = g.tiles;
  const std::int64_t key_tiles = (g.s + tl.bwd_k - 1) / tl.bwd_k, query_tiles = (g.t + tl.bwd_q - 1) / tl.bwd_q;
  auto make_scratch = [&] {
    BackwardScratch<T> s;
    s.p = AlignedBuffer<T>(tl.p_rows * tl.p_cols);
    s.ds = AlignedBuffer<T>(tl.p_rows * tl.p_cols);
    s.visible.resize(tl.p_rows);
    return s;
  };
  // The query tiles that see key tile s0 start at this one and end before query_tiles_end.
  auto first_query_tile = [&](std::int64_t s0) { return g.query_begin(s0) / tl.bwd_q * tl.bwd_q; };
  auto query_tiles_end = [&](std::int64_t s0) { return g.query_end(std::min(g.s, s0 + tl.bwd_k) - 1); };
  // fused: one task per (b, kv head) does everything.
  auto fused_task = [&](std::int64_t i, BackwardScratch<T>& s) {
    const std::int64_t kv = i % g.hkv, b = i / g.hkv;
    for (std::int64_t s0 = 0; s0 < g.s; s0 += tl.bwd_k) {
      zero_key_tile(a, b, kv, s0);
      for (std::int64_t h = kv * g.group; h < (kv + 1) * g.group; ++h)
        for (std::int64_t t0 = first_query_tile(s0); t0 < query_tiles_end(s0); t0 += tl.bwd_q) {
          const Tile tile = grid_tile(g, t0, s0);
          if (!backward_tile(a, b, h, tile, true, s) || !backward_tile_dq(a, b, h, tile, s)) return false;
        }
    }
    return true;
  };
  // split, first pass: one task per (b, kv head, key tile) accumulates that tile's dK, dV.
  auto key_tile_task = [&](std::int64_t i, BackwardScratch<T>& s) {
    const std::int64_t s0 = i % key_tiles * tl.bwd_k, kv = i / key_tiles % g.hkv, b = i / (key_tiles * g.hkv);
    zero_key_tile(a, b, kv, s0);
    for (std::int64_t h = kv * g.group; h < (kv + 1) * g.group; ++h)
      for (std::int64_t t0 = first_query_tile(s0); t0 < query_tiles_end(s0); t0 += tl.bwd_q)
        if (!backward_tile(a, b, h, grid_tile(g, t0, s0), true, s)) return false;
    return true;
  };
  // split, second pass: one task per (b, query head, query tile) accumulates its dQ rows.
  auto query_tile_task = [&](std::int64_t i, BackwardScratch<T>& s) {
    const std::int64_t t0 = i % query_tiles * tl.bwd_q, h = i / query_tiles % g.hq, b = i / (query_tiles * g.hq);
    const std::int64_t key_end = g.key_end(std::min(g.t, t0 + tl.bwd_q) - 1);
    for (std::int64_t s0 = g.key_begin(t0) / tl.bwd_k * tl.bwd_k; s0 < key_end; s0 += tl.bwd_k) {
      const Tile tile = grid_tile(g, t0, s0);
      if (!backward_tile(a, b, h, tile, false, s) || !backward_tile_dq(a, b, h, tile, s)) return false;
    }
    return true;
  };
  if (tl.spans) {
    DARK_CHECK(span_backward(a, make_scratch), "flash_attention backward: dnnl_sgemm failed on a tile (D = ", d, ")");
    return;
  }
  const bool ok = use_fused_schedule(g)
                      ? run_tasks<BackwardScratch<T>>(g.batch * g.hkv, make_scratch, fused_task)
                      : run_tasks<BackwardScratch<T>>(g.batch * g.hkv * key_tiles, make_scratch, key_tile_task) &&
                            run_tasks<BackwardScratch<T>>(g.batch * g.hq * query_tiles, make_scratch, query_tile_task);
  DARK_CHECK(ok, "flash_attention backward: dnnl_sgemm failed on a tile (D = ", d, ")");
}

DARK_REGISTER_KERNEL(flash_attention_forward, cpu, f32, flash_attention_forward_kernel<float>);
DARK_REGISTER_KERNEL(flash_attention_forward, cpu, f64, flash_attention_forward_kernel<double>);
DARK_REGISTER_KERNEL(flash_attention_backward, cpu, f32, flash_attention_backward_kernel<float>);
DARK_REGISTER_KERNEL(flash_attention_backward, cpu, f64, flash_attention_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
