// The pieces the CPU linear-attention kernels share (causal: linear_attention.cpp; sliding
// window: windowed_linear_attention.cpp): vectorised row loops, the chunk-recurrence state,
// and the shapes of one call with its per-chunk builders (keys, queries, causal decay).
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

// Shapes of one call and the per-task chunk builders. All tensors contiguous:
// q (B, T, Hq, m), k (B, T, Hkv, m), v (B, T, Hkv, Dv), out / dout (B, T, Hq, Dv),
// den (B, Hq, T), key mask (B, T) i32.
template <class T>
struct Problem {
  std::int64_t batch, len, hq, hkv, m, dv, w, group, chunk;
  bool causal;
  const T *q, *k, *v;
  const std::int32_t* key_mask;  // nullptr: every key is real

  Problem(const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& key_mask_, bool causal_,
          std::int64_t chunk_)
      : batch(q_.shape()[0]), len(q_.shape()[1]), hq(q_.shape()[2]), hkv(k_.shape()[2]), m(q_.shape()[3]),
        dv(v_.shape()[3]), w(v_.shape()[3] + 1), group(q_.shape()[2] / k_.shape()[2]),
        chunk(std::max<std::int64_t>(1, std::min(chunk_, q_.shape()[1]))), causal(causal_), q(q_.data<T>()),
        k(k_.data<T>()), v(v_.data<T>()),
        key_mask(key_mask_.defined() ? key_mask_.data<std::int32_t>() : nullptr) {}

  const T* krow(std::int64_t b, std::int64_t j, std::int64_t kv) const { return k + ((b * len + j) * hkv + kv) * m; }
  const T* vrow(std::int64_t b, std::int64_t j, std::int64_t kv) const { return v + ((b * len + j) * hkv + kv) * dv; }
  const T* qrow(std::int64_t b, std::int64_t t, std::int64_t h) const { return q + ((b * len + t) * hq + h) * m; }
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
      gr[dv] = -dot * inv;
    }
  }
  bool real(std::int64_t b, std::int64_t j) const { return key_mask == nullptr || key_mask[b * len + j] != 0; }

  // Key offsets o[0, T) of (b, kv): -inf where no real key is in view.
  void offsets(std::int64_t b, std::int64_t kv, std::vector<T>& o) const {
    o.resize(len);
    T run = neg_inf<T>();
    for (std::int64_t j = 0; j < len; ++j) {
      if (real(b, j)) run = row::max(krow(b, j, kv), m, run);
      o[j] = run;
    }
    if (!causal) std::fill(o.begin(), o.end(), run);
  }
  // E (L x m) and Vx (L x W) for positions [c0, c0 + L); rows of padded keys are 0.
  void keys(std::int64_t b, std::int64_t kv, std::int64_t c0, std::int64_t n, const std::vector<T>& o, T* e,
            T* vx) const {
    for (std::int64_t r = 0; r < n; ++r) {
      T* er = e + r * m;
      T* xr = vx + r * w;
      if (!real(b, c0 + r)) {
        std::fill(er, er + m, T(0));
        std::fill(xr, xr + w, T(0));
        continue;
      }
      const T* kr = krow(b, c0 + r, kv);
      row::exp_shift(kr, o[c0 + r], er, m);
      const T* vr = vrow(b, c0 + r, kv);
      std::copy(vr, vr + dv, xr);
      xr[dv] = T(1);
    }
  }
  // Phi (L x m) of query head h for positions [c0, c0 + L).
  void queries(std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, T* phi) const {
    for (std::int64_t r = 0; r < n; ++r) {
      const T* qr = qrow(b, c0 + r, h);
      row::exp_shift(qr, row::max(qr, m, neg_inf<T>()), phi + r * m, m);
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
