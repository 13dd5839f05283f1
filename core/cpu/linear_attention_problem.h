// The pieces the CPU linear-attention kernels share (the sweeps of linear_attention_sweeps.h,
// run by linear_attention.cpp and random_feature_attention.cpp; sliding window:
// windowed_linear_attention.cpp): vectorised row loops, the chunk-recurrence state, the
// source of the feature logits (GivenLogits here; ComputedLogits in
// random_feature_attention.cpp), and the shapes of one call with its per-chunk builders
// (keys, queries, causal decay).
// Internal to core/cpu: everything is in an unnamed namespace, one copy per kernel file.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/tile_gemm.h"
#include "core/cpu/vec_math.h"
#include "core/tensor.h"

namespace dark::cpu {
namespace {
inline float exp_t(float x) { return vmath::exp(x); }
inline double exp_t(double x) { return std::exp(x); }

#define DARK_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#define DARK_ALWAYS_INLINE __attribute__((always_inline)) inline

// The row loops of the kernel (exp of shifted logits, maxima, scaling, products). They are
// most of its time outside the gemms, so the float32 versions are compiled for x86-64,
// x86-64-v3 and x86-64-v4 (target_clones, as in the elementwise and flash kernels; the
// always-inline bodies take the clone's instruction set) and vectorise with vmath::exp.
namespace row {
template <class T>
DARK_ALWAYS_INLINE void exp_shift_body(const T* x, T shift, T* out, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) out[i] = exp_t(x[i] - shift);
}
template <class T>
DARK_ALWAYS_INLINE T max_body(const T* x, std::int64_t n, T start) {
  T mx = start;
#pragma omp simd reduction(max : mx)
  for (std::int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  return mx;
}
template <class T>
DARK_ALWAYS_INLINE void axpy_body(T* y, const T* x, T f, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i] * f;
}
template <class T>
DARK_ALWAYS_INLINE void scale_body(T* y, T f, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] *= f;
}
template <class T>
DARK_ALWAYS_INLINE void mul_body(T* y, const T* a, const T* b, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

DARK_CPU_CLONES void exp_shift_f32(const float* x, float shift, float* out, std::int64_t n) {
  exp_shift_body(x, shift, out, n);
}
DARK_CPU_CLONES float max_f32(const float* x, std::int64_t n, float start) { return max_body(x, n, start); }
DARK_CPU_CLONES void axpy_f32(float* y, const float* x, float f, std::int64_t n) { axpy_body(y, x, f, n); }
DARK_CPU_CLONES void scale_f32(float* y, float f, std::int64_t n) { scale_body(y, f, n); }
DARK_CPU_CLONES void mul_f32(float* y, const float* a, const float* b, std::int64_t n) { mul_body(y, a, b, n); }

// out[i] = exp(x[i] - shift)
template <class T>
void exp_shift(const T* x, T shift, T* out, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) exp_shift_f32(x, shift, out, n);
  else exp_shift_body(x, shift, out, n);
}
// max(start, x[0..n))
template <class T>
T max(const T* x, std::int64_t n, T start) {
  if constexpr (std::is_same_v<T, float>) return max_f32(x, n, start);
  else return max_body(x, n, start);
}
// y += f x
template <class T>
void axpy(T* y, const T* x, T f, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) axpy_f32(y, x, f, n);
  else axpy_body(y, x, f, n);
}
// y *= f
template <class T>
void scale(T* y, T f, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) scale_f32(y, f, n);
  else scale_body(y, f, n);
}
// y = a * b elementwise (y may be a or b)
template <class T>
void mul(T* y, const T* a, const T* b, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) mul_f32(y, a, b, n);
  else mul_body(y, a, b, n);
}
}  // namespace row

template <class T>
constexpr T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

// A chunk-recurrence state (S of the forward sweeps, R of the reverse one): an m x W matrix
// held at offset `at`. While `held` is false it holds nothing real: exact zeros, and `at`
// is meaningless (it may stand for the offset -inf, whose differences are never taken).
template <class T>
struct State {
  std::vector<T> mat;
  T at = 0;
  bool held = false;
};

// Feature logits given as tensors (linear_attention): q (B, T, Hq, m), k (B, T, Hkv, m).
// Rows are read in place; the backward writes the logit gradients dq, dk (same layouts).
// The other source, ComputedLogits (random_feature_attention.cpp), has the same members.
template <class T>
struct GivenLogits {
  const T *q, *k;
  std::int64_t len, hq, hkv, m;
  T *dq = nullptr, *dk = nullptr;  // backward only

  // Rows [c0, c0 + n) of query head h (or of kv head kv) and their stride; `buf` (n x m)
  // is where a computing source would put them, unused here.
  const T* query_rows(std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t, T*, std::int64_t& ld) const {
    ld = hq * m;
    return q + ((b * len + c0) * hq + h) * m;
  }
  const T* key_rows(std::int64_t b, std::int64_t kv, std::int64_t c0, std::int64_t, T*, std::int64_t& ld) const {
    ld = hkv * m;
    return k + ((b * len + c0) * hkv + kv) * m;
  }
  // The logit gradient of those rows is a * da (a = Phi or E, da = dPhi or dE, n x m);
  // `da` may be overwritten, `domega` (a computing source's weight gradient) is unused.
  void query_grad(std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, const T* a, T* da, T*) const {
    for (std::int64_t r = 0; r < n; ++r) row::mul(dq + ((b * len + c0 + r) * hq + h) * m, a + r * m, da + r * m, m);
  }
  void key_grad(std::int64_t b, std::int64_t kv, std::int64_t c0, std::int64_t n, const T* a, T* da, T*) const {
    for (std::int64_t r = 0; r < n; ++r) row::mul(dk + ((b * len + c0 + r) * hkv + kv) * m, a + r * m, da + r * m, m);
  }
};

// Shapes of one call and the per-task chunk builders. All tensors contiguous: the logits
// come from Src (see GivenLogits), v (B, T, Hkv, Dv), out / dout (B, T, Hq, Dv),
// den (B, Hq, T), key mask (B, T) i32.
template <class T, class Src = GivenLogits<T>>
struct Problem {
  std::int64_t batch, len, hq, hkv, m, dv, w, group, chunk;
  bool causal;
  Src src;
  const T* v;
  const std::int32_t* key_mask;  // nullptr: every key is real
  // Optional (B, Hq, T) rows of the normaliser (kernels.h, linear_attention_forward): the
  // forward writes log_norm when set, the backward adds dlog_norm to G when set.
  T* log_norm = nullptr;
  const T* dlog_norm = nullptr;

  // batch, len, hq, hkv, m are the logits' shape (query side (B, T, Hq, m), key side Hkv).
  Problem(const Src& src_, std::int64_t batch_, std::int64_t len_, std::int64_t hq_, std::int64_t hkv_,
          std::int64_t m_, const Tensor& v_, const Tensor& key_mask_, bool causal_, std::int64_t chunk_)
      : batch(batch_), len(len_), hq(hq_), hkv(hkv_), m(m_), dv(v_.shape()[3]), w(v_.shape()[3] + 1),
        group(hq_ / hkv_), chunk(std::max<std::int64_t>(1, std::min(chunk_, len_))), causal(causal_), src(src_),
        v(v_.data<T>()), key_mask(key_mask_.defined() ? key_mask_.data<std::int32_t>() : nullptr) {}
  // Given logits q (B, T, Hq, m), k (B, T, Hkv, m).
  Problem(const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& key_mask_, bool causal_,
          std::int64_t chunk_)
      : Problem(Src{q_.data<T>(), k_.data<T>(), q_.shape()[1], q_.shape()[2], k_.shape()[2], q_.shape()[3]},
                q_.shape()[0], q_.shape()[1], q_.shape()[2], k_.shape()[2], q_.shape()[3], v_, key_mask_, causal_,
                chunk_) {}

  const T* krow(std::int64_t b, std::int64_t j, std::int64_t kv) const { return src.k + ((b * len + j) * hkv + kv) * m; }
  const T* vrow(std::int64_t b, std::int64_t j, std::int64_t kv) const { return v + ((b * len + j) * hkv + kv) * dv; }
  std::int64_t out_index(std::int64_t b, std::int64_t t, std::int64_t h) const { return ((b * len + t) * hq + h) * dv; }
  // G (L x W) of query head h for positions [c0, c0 + L) from the forward's out and guarded
  // den and the output gradient: [dout / den', -(dout . out) / den']; 0 for a query whose
  // offset o is -inf (it sees no real key: its output is the constant 0).
  void output_grads(const T* out, const T* den, const T* dout, std::int64_t b, std::int64_t h, std::int64_t c0,
                    std::int64_t n, const std::vector<T>& o, T* g) const {
    for (std::int64_t r = 0; r < n; ++r) {
      T* gr = g + r * w;
      if (o[c0 + r] == neg_inf<T>()) {
        std::fill(gr, gr + w, T(0));
        continue;
      }
      const std::int64_t idx = out_index(b, c0 + r, h);
      const T inv = T(1) / den[(b * hq + h) * len + c0 + r];
      T dot = 0;
      for (std::int64_t j = 0; j < dv; ++j) {
        gr[j] = dout[idx + j] * inv;
        dot += dout[idx + j] * out[idx + j];
      }
      // d log(den'_t) / d a_tj = 1 / den'_t: lse's gradient meets Vx's ones column
      gr[dv] = dlog_norm ? (dlog_norm[(b * hq + h) * len + c0 + r] - dot) * inv : -dot * inv;
    }
  }
  // log_norm of row t of query head h (when wanted): qoff + o + log(den'), -inf for a row
  // that sees no real key (o = -inf).
  void write_log_norm(std::int64_t b, std::int64_t h, std::int64_t t, T qoff, T o, T guarded_den) const {
    if (log_norm) log_norm[(b * hq + h) * len + t] = o == neg_inf<T>() ? o : qoff + o + std::log(guarded_den);
  }
  bool real(std::int64_t b, std::int64_t j) const { return key_mask == nullptr || key_mask[b * len + j] != 0; }

  // Bidirectional key offsets of (b, kv): o[0, T) all equal to the largest logit of any real
  // key (-inf when none is real). Causal sweeps build theirs chunk by chunk in keys().
  // `buf` is a chunk x m scratch.
  void bidirectional_offsets(std::int64_t b, std::int64_t kv, std::vector<T>& o, T* buf) const {
    T run = neg_inf<T>();
    for (std::int64_t c0 = 0; c0 < len; c0 += chunk) {
      const std::int64_t n = std::min(chunk, len - c0);
      std::int64_t ld = 0;
      const T* rows = src.key_rows(b, kv, c0, n, buf, ld);
      for (std::int64_t r = 0; r < n; ++r)
        if (real(b, c0 + r)) run = row::max(rows + r * ld, m, run);
    }
    o.assign(len, run);
  }
  // E (L x m) and Vx (L x W) for positions [c0, c0 + L); rows of padded keys are 0. With
  // `extend` (causal sweeps visiting the chunks in order), o[c0, c0 + L) is written first:
  // the running max over real positions <= t of max_f k[t, f], continued from o[c0 - 1]
  // (o must have size T; -inf until the first real key).
  void keys(std::int64_t b, std::int64_t kv, std::int64_t c0, std::int64_t n, std::vector<T>& o, T* e, T* vx,
            bool extend) const {
    std::int64_t ld = 0;
    const T* rows = src.key_rows(b, kv, c0, n, e, ld);  // e itself when computed: rows are exp'd in place
    if (extend) {
      T run = c0 > 0 ? o[c0 - 1] : neg_inf<T>();
      for (std::int64_t r = 0; r < n; ++r) {
        if (real(b, c0 + r)) run = row::max(rows + r * ld, m, run);
        o[c0 + r] = run;
      }
    }
    for (std::int64_t r = 0; r < n; ++r) {
      T* er = e + r * m;
      T* xr = vx + r * w;
      if (!real(b, c0 + r)) {
        std::fill(er, er + m, T(0));
        std::fill(xr, xr + w, T(0));
        continue;
      }
      row::exp_shift(rows + r * ld, o[c0 + r], er, m);
      const T* vr = vrow(b, c0 + r, kv);
      std::copy(vr, vr + dv, xr);
      xr[dv] = T(1);
    }
  }
  // Phi (L x m) of query head h for positions [c0, c0 + L), and each row's offset qoff (the
  // max logit) into qoff[0, L) when qoff is not null.
  void queries(std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, T* phi, T* qoff = nullptr) const {
    std::int64_t ld = 0;
    const T* rows = src.query_rows(b, h, c0, n, phi, ld);  // phi itself when computed
    for (std::int64_t r = 0; r < n; ++r) {
      const T* qr = rows + r * ld;
      const T mx = row::max(qr, m, neg_inf<T>());
      if (qoff) qoff[r] = mx;
      row::exp_shift(qr, mx, phi + r * m, m);
    }
  }
  // The causal intra-chunk weights D[r][c] = exp(o_c - o_r) for real keys c <= r, else 0
  // (L x L, ld chunk).
  void decay(std::int64_t b, std::int64_t c0, std::int64_t n, const std::vector<T>& o, T* d) const {
    for (std::int64_t r = 0; r < n; ++r) {
      T* dr = d + r * chunk;
      // exp of every c <= r first (vectorised), then the zeros: a padded key (offset -inf
      // before the first real key) may give NaN here and is overwritten.
      row::exp_shift(o.data() + c0, o[c0 + r], dr, r + 1);
      for (std::int64_t c = 0; c <= r; ++c)
        if (!real(b, c0 + c)) dr[c] = T(0);
      std::fill(dr + r + 1, dr + n, T(0));
    }
  }
  void apply_decay(T* p, const T* d, std::int64_t n) const {
    for (std::int64_t r = 0; r < n; ++r) row::mul(p + r * chunk, p + r * chunk, d + r * chunk, n);
  }
  // y_r += z_r exp(at - o_r) for rows r of chunk c0 (cols wide): the part of a held state
  // (at <= o_r, both finite) seen by the chunk's queries.
  void add_state(std::int64_t c0, std::int64_t n, const std::vector<T>& o, T at, const T* z, T* y,
                 std::int64_t cols) const {
    for (std::int64_t r = 0; r < n; ++r) {
      row::axpy(y + r * cols, z + r * cols, exp_t(at - o[c0 + r]), cols);
    }
  }
  // Folds chunk [c0, c0 + n) (E and Vx from keys(); Vx is scaled in place) into S, which
  // moves to the chunk's last offset. Before the first real key S stays empty.
  bool fold_keys(std::int64_t b, std::int64_t c0, std::int64_t n, const std::vector<T>& o, const T* e, T* vx,
                 State<T>& s) const {
    const T o_new = o[c0 + n - 1];
    if (o_new == neg_inf<T>()) return true;
    if (s.held) {
      const T f = exp_t(s.at - o_new);
      row::scale(s.mat.data(), f, static_cast<std::int64_t>(s.mat.size()));
    }
    for (std::int64_t r = 0; r < n; ++r) {
      if (!real(b, c0 + r)) continue;  // a zero row
      const T f = exp_t(o[c0 + r] - o_new);
      row::scale(vx + r * w, f, w);
    }
    if (!gemm('T', 'N', m, w, n, T(1), e, m, vx, w, T(1), s.mat.data(), w)) return false;
    s.at = o_new;
    s.held = true;
    return true;
  }
};

}  // namespace
}  // namespace dark::cpu
