// CPU linear attention on feature logits (the shared kernel of Performer / LFK / DARKFormer),
// forward and backward, float32 and float64. Semantics: autograd/ops.h (linear_attention).
//
// One task per (batch, kv head) handles that kv head's group of query heads, so every
// key-side quantity (offsets, E, [V, 1], states) is built once per group. Per task:
//   o_j   key offset: causal, the running max over positions <= j of max_f k[j, f]
//         (non-decreasing); bidirectional, one max over all positions and features.
//   E_j   = exp(k_j - o_j) <= 1;  Vx_j = [v_j, 1] (the ones column gives the denominator).
//   Phi_t = exp(q_t - max_f q_t) <= 1 (per query head).
// Then a_tj = exp(o_j - o_t) Phi_t . E_j, and Y_t = sum_j a_tj Vx_j = [num_t, den_t];
// out_t = num_t / (den_t + eps).
//
// Causal, chunks of C positions: intra-chunk P = Phi E^T (one gemm), scaled by
// exp(o_j - o_t) and zeroed for j > t, then P Vx; inter-chunk a state
// S = sum_j E_j^T Vx_j exp(o_j - o_S) (m x (Dv + 1)) held at o_S, the offset of the last
// position already folded in; query t adds Phi_t S exp(o_S - o_t) (<= 1). Moving on, S is
// rescaled by exp(o_S - o_new) (<= 1). No value of row t depends on a later position
// (masked entries are exact zeros times finite values), so prefixes are bit-stable.
//
// Backward, with G_t = [dout_t / den'_t, -(dout_t . out_t) / den'_t] (den' = den + eps,
// saved by the forward): dA_tj = G_t . Vx_j, and
//   dPhi_t = sum_j dA_tj exp(o_j - o_t) E_j        (a forward sweep recomputing S: G S^T)
//   dE_j   = sum_t dA_tj exp(o_j - o_t) Phi_t      } a reverse sweep with the state
//   dVx_j  = sum_t a_tj G_t                        } R = sum_h sum_t Phi_t^T G_t exp(o_R - o_t)
// held at o_R = the offset of the earliest position folded in (so both exp factors <= 1);
// dq = Phi * dPhi, dk = E * dE, dv = dVx[:, :Dv]. States are recomputed, never stored:
// extra memory is O(T) offsets plus O(C (C + m + Dv) + m Dv) scratch per thread.
// Deterministic: fixed summation order, no atomics, independent of the thread count.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/cpu/vec_math.h"
#include "core/cpu/tile_gemm.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {


inline float exp_t(float x) { return vmath::exp(x); }
inline double exp_t(double x) { return std::exp(x); }

// Runs task(i) for i in [0, n) on the OpenMP threads (dynamic schedule; each task writes
// disjoint outputs, so timing never changes a result). Nested thread count 1 keeps
// oneDNN's sgemm single-threaded (the same arithmetic whatever the team size).
template <class Task>
bool run_tasks(std::int64_t n, Task&& task) {
  if (n <= 0) return true;
  std::atomic<bool> ok{true};
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), n));
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n; ++i)
      if (ok.load(std::memory_order_relaxed) && !task(i)) ok.store(false, std::memory_order_relaxed);
  }
  return ok.load();
}

// Shapes of one call and the per-task chunk builders. All tensors contiguous:
// q (B, T, Hq, m), k (B, T, Hkv, m), v (B, T, Hkv, Dv), out / dout (B, T, Hq, Dv),
// den (B, Hq, T).
template <class T>
struct Problem {
  std::int64_t batch, len, hq, hkv, m, dv, w, group, chunk;
  bool causal;
  const T *q, *k, *v;

  Problem(const Tensor& q_, const Tensor& k_, const Tensor& v_, bool causal_, std::int64_t chunk_)
      : batch(q_.shape()[0]), len(q_.shape()[1]), hq(q_.shape()[2]), hkv(k_.shape()[2]), m(q_.shape()[3]),
        dv(v_.shape()[3]), w(v_.shape()[3] + 1), group(q_.shape()[2] / k_.shape()[2]),
        chunk(std::max<std::int64_t>(1, std::min(chunk_, q_.shape()[1]))), causal(causal_), q(q_.data<T>()),
        k(k_.data<T>()), v(v_.data<T>()) {}

  const T* krow(std::int64_t b, std::int64_t j, std::int64_t kv) const { return k + ((b * len + j) * hkv + kv) * m; }
  const T* vrow(std::int64_t b, std::int64_t j, std::int64_t kv) const { return v + ((b * len + j) * hkv + kv) * dv; }
  const T* qrow(std::int64_t b, std::int64_t t, std::int64_t h) const { return q + ((b * len + t) * hq + h) * m; }
  std::int64_t out_index(std::int64_t b, std::int64_t t, std::int64_t h) const { return ((b * len + t) * hq + h) * dv; }

  // Key offsets o[0, T) of (b, kv).
  void offsets(std::int64_t b, std::int64_t kv, std::vector<T>& o) const {
    o.resize(len);
    T run = -std::numeric_limits<T>::infinity();
    for (std::int64_t j = 0; j < len; ++j) {
      const T* kr = krow(b, j, kv);
      for (std::int64_t f = 0; f < m; ++f) run = kr[f] > run ? kr[f] : run;
      o[j] = run;
    }
    if (!causal) std::fill(o.begin(), o.end(), run);
  }
  // E (L x m) and Vx (L x W) for positions [c0, c0 + L).
  void keys(std::int64_t b, std::int64_t kv, std::int64_t c0, std::int64_t n, const std::vector<T>& o, T* e,
            T* vx) const {
    for (std::int64_t r = 0; r < n; ++r) {
      const T* kr = krow(b, c0 + r, kv);
      const T off = o[c0 + r];
      T* er = e + r * m;
      for (std::int64_t f = 0; f < m; ++f) er[f] = exp_t(kr[f] - off);
      const T* vr = vrow(b, c0 + r, kv);
      T* xr = vx + r * w;
      std::copy(vr, vr + dv, xr);
      xr[dv] = T(1);
    }
  }
  // Phi (L x m) of query head h for positions [c0, c0 + L).
  void queries(std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, T* phi) const {
    for (std::int64_t r = 0; r < n; ++r) {
      const T* qr = qrow(b, c0 + r, h);
      T mx = -std::numeric_limits<T>::infinity();
      for (std::int64_t f = 0; f < m; ++f) mx = qr[f] > mx ? qr[f] : mx;
      T* pr = phi + r * m;
      for (std::int64_t f = 0; f < m; ++f) pr[f] = exp_t(qr[f] - mx);
    }
  }
  // The causal intra-chunk weights D[r][c] = exp(o_c - o_r) for c <= r, else 0 (L x L, ld chunk).
  void decay(std::int64_t c0, std::int64_t n, const std::vector<T>& o, T* d) const {
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < n; ++c) d[r * chunk + c] = c <= r ? exp_t(o[c0 + c] - o[c0 + r]) : T(0);
  }
  void apply_decay(T* p, const T* d, std::int64_t n) const {
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < n; ++c) p[r * chunk + c] *= d[r * chunk + c];
  }
};

template <class T>
void linear_attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& den,
                                     bool causal, double eps_d, std::int64_t chunk) {
  const Problem<T> pr(q, k, v, causal, chunk);
  const T eps = static_cast<T>(eps_d);
  T* po = out.data<T>();
  T* pden = den.data<T>();
  const std::int64_t c = pr.chunk, m = pr.m, w = pr.w, dv = pr.dv;
  auto write_rows = [&](std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, const T* y) {
    for (std::int64_t r = 0; r < n; ++r) {
      const T* yr = y + r * w;
      const T d = yr[dv] + eps;
      T* o = po + pr.out_index(b, c0 + r, h);
      for (std::int64_t j = 0; j < dv; ++j) o[j] = yr[j] / d;
      pden[(b * pr.hq + h) * pr.len + c0 + r] = d;
    }
  };
  auto task = [&](std::int64_t i) {
    const std::int64_t kv = i % pr.hkv, b = i / pr.hkv;
    std::vector<T> o, e(c * m), vx(c * w), phi(c * m), p(c * c), dec(c * c), y(c * w), z(c * w), s(m * w, T(0));
    pr.offsets(b, kv, o);
    if (!causal) {  // S = sum_j E_j^T Vx_j, then Y = Phi S
      for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
        const std::int64_t n = std::min(c, pr.len - c0);
        pr.keys(b, kv, c0, n, o, e.data(), vx.data());
        if (!gemm('T', 'N', m, w, n, T(1), e.data(), m, vx.data(), w, T(1), s.data(), w)) return false;
      }
      for (std::int64_t h = kv * pr.group; h < (kv + 1) * pr.group; ++h)
        for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
          const std::int64_t n = std::min(c, pr.len - c0);
          pr.queries(b, h, c0, n, phi.data());
          if (!gemm('N', 'N', n, w, m, T(1), phi.data(), m, s.data(), w, T(0), y.data(), w)) return false;
          write_rows(b, h, c0, n, y.data());
        }
      return true;
    }
    bool have_state = false;
    T o_s = 0;
    for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
      const std::int64_t n = std::min(c, pr.len - c0);
      pr.keys(b, kv, c0, n, o, e.data(), vx.data());
      pr.decay(c0, n, o, dec.data());
      for (std::int64_t h = kv * pr.group; h < (kv + 1) * pr.group; ++h) {
        pr.queries(b, h, c0, n, phi.data());
        if (!gemm('N', 'T', n, n, m, T(1), phi.data(), m, e.data(), m, T(0), p.data(), c)) return false;
        pr.apply_decay(p.data(), dec.data(), n);
        if (!gemm('N', 'N', n, w, n, T(1), p.data(), c, vx.data(), w, T(0), y.data(), w)) return false;
        if (have_state) {
          if (!gemm('N', 'N', n, w, m, T(1), phi.data(), m, s.data(), w, T(0), z.data(), w)) return false;
          for (std::int64_t r = 0; r < n; ++r) {
            const T f = exp_t(o_s - o[c0 + r]);
            for (std::int64_t j = 0; j < w; ++j) y[r * w + j] += z[r * w + j] * f;
          }
        }
        write_rows(b, h, c0, n, y.data());
      }
      // fold the chunk into S, re-expressed at the chunk's last offset
      const T o_new = o[c0 + n - 1];
      if (have_state) {
        const T f = exp_t(o_s - o_new);
        for (T& x : s) x *= f;
      }
      for (std::int64_t r = 0; r < n; ++r) {
        const T f = exp_t(o[c0 + r] - o_new);
        for (std::int64_t j = 0; j < w; ++j) vx[r * w + j] *= f;
      }
      if (!gemm('T', 'N', m, w, n, T(1), e.data(), m, vx.data(), w, T(1), s.data(), w)) return false;
      o_s = o_new;
      have_state = true;
    }
    return true;
  };
  const bool ok = run_tasks(pr.batch * pr.hkv, task);
  DARK_CHECK(ok, "linear_attention: dnnl_sgemm failed on a chunk (m = ", m, ", Dv = ", dv, ")");
}

template <class T>
void linear_attention_backward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                      const Tensor& den, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv_t,
                                      bool causal, std::int64_t chunk) {
  const Problem<T> pr(q, k, v, causal, chunk);
  const T* po = out.data<T>();
  const T* pden = den.data<T>();
  const T* pdo = dout.data<T>();
  T* pdq = dq.data<T>();
  T* pdk = dk.data<T>();
  T* pdv = dv_t.data<T>();
  const std::int64_t c = pr.chunk, m = pr.m, w = pr.w, dv = pr.dv;
  // G (L x W) of query head h for positions [c0, c0 + L).
  auto grads = [&](std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, T* g) {
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t idx = pr.out_index(b, c0 + r, h);
      const T inv = T(1) / pden[(b * pr.hq + h) * pr.len + c0 + r];
      T* gr = g + r * w;
      T dot = 0;
      for (std::int64_t j = 0; j < dv; ++j) {
        gr[j] = pdo[idx + j] * inv;
        dot += pdo[idx + j] * po[idx + j];
      }
      gr[dv] = -dot * inv;
    }
  };
  auto write_dq = [&](std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, const T* phi, const T* dphi) {
    for (std::int64_t r = 0; r < n; ++r) {
      T* d = pdq + ((b * pr.len + c0 + r) * pr.hq + h) * m;
      for (std::int64_t f = 0; f < m; ++f) d[f] = phi[r * m + f] * dphi[r * m + f];
    }
  };
  auto write_dkv = [&](std::int64_t b, std::int64_t kv, std::int64_t c0, std::int64_t n, const T* e, const T* de,
                       const T* dvx) {
    for (std::int64_t r = 0; r < n; ++r) {
      T* d = pdk + ((b * pr.len + c0 + r) * pr.hkv + kv) * m;
      for (std::int64_t f = 0; f < m; ++f) d[f] = e[r * m + f] * de[r * m + f];
      std::copy(dvx + r * w, dvx + r * w + dv, pdv + ((b * pr.len + c0 + r) * pr.hkv + kv) * dv);
    }
  };
  auto task = [&](std::int64_t i) {
    const std::int64_t kv = i % pr.hkv, b = i / pr.hkv;
    const std::int64_t h0 = kv * pr.group, h1 = (kv + 1) * pr.group;
    std::vector<T> o, e(c * m), vx(c * w), phi(c * m), g(c * w), p(c * c), mm(c * c), dec(c * c), dphi(c * m),
        zm(c * m), zw(c * w), de(c * m), dvx(c * w), s(m * w, T(0)), rs(m * w, T(0));
    pr.offsets(b, kv, o);
    if (!causal) {
      for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {  // S, as in the forward
        const std::int64_t n = std::min(c, pr.len - c0);
        pr.keys(b, kv, c0, n, o, e.data(), vx.data());
        if (!gemm('T', 'N', m, w, n, T(1), e.data(), m, vx.data(), w, T(1), s.data(), w)) return false;
      }
      for (std::int64_t h = h0; h < h1; ++h)  // dPhi = G S^T; R = sum Phi^T G
        for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
          const std::int64_t n = std::min(c, pr.len - c0);
          pr.queries(b, h, c0, n, phi.data());
          grads(b, h, c0, n, g.data());
          if (!gemm('N', 'T', n, m, w, T(1), g.data(), w, s.data(), w, T(0), dphi.data(), m)) return false;
          write_dq(b, h, c0, n, phi.data(), dphi.data());
          if (!gemm('T', 'N', m, w, n, T(1), phi.data(), m, g.data(), w, T(1), rs.data(), w)) return false;
        }
      for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {  // dE = Vx R^T, dVx = E R
        const std::int64_t n = std::min(c, pr.len - c0);
        pr.keys(b, kv, c0, n, o, e.data(), vx.data());
        if (!gemm('N', 'T', n, m, w, T(1), vx.data(), w, rs.data(), w, T(0), de.data(), m)) return false;
        if (!gemm('N', 'N', n, w, m, T(1), e.data(), m, rs.data(), w, T(0), dvx.data(), w)) return false;
        write_dkv(b, kv, c0, n, e.data(), de.data(), dvx.data());
      }
      return true;
    }
    // causal, forward sweep: dq (recomputing S exactly as the forward does)
    bool have_state = false;
    T o_s = 0;
    for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
      const std::int64_t n = std::min(c, pr.len - c0);
      pr.keys(b, kv, c0, n, o, e.data(), vx.data());
      pr.decay(c0, n, o, dec.data());
      for (std::int64_t h = h0; h < h1; ++h) {
        pr.queries(b, h, c0, n, phi.data());
        grads(b, h, c0, n, g.data());
        if (!gemm('N', 'T', n, n, w, T(1), g.data(), w, vx.data(), w, T(0), mm.data(), c)) return false;
        pr.apply_decay(mm.data(), dec.data(), n);
        if (!gemm('N', 'N', n, m, n, T(1), mm.data(), c, e.data(), m, T(0), dphi.data(), m)) return false;
        if (have_state) {
          if (!gemm('N', 'T', n, m, w, T(1), g.data(), w, s.data(), w, T(0), zm.data(), m)) return false;
          for (std::int64_t r = 0; r < n; ++r) {
            const T f = exp_t(o_s - o[c0 + r]);
            for (std::int64_t j = 0; j < m; ++j) dphi[r * m + j] += zm[r * m + j] * f;
          }
        }
        write_dq(b, h, c0, n, phi.data(), dphi.data());
      }
      const T o_new = o[c0 + n - 1];
      if (have_state) {
        const T f = exp_t(o_s - o_new);
        for (T& x : s) x *= f;
      }
      for (std::int64_t r = 0; r < n; ++r) {
        const T f = exp_t(o[c0 + r] - o_new);
        for (std::int64_t j = 0; j < w; ++j) vx[r * w + j] *= f;
      }
      if (!gemm('T', 'N', m, w, n, T(1), e.data(), m, vx.data(), w, T(1), s.data(), w)) return false;
      o_s = o_new;
      have_state = true;
    }
    // causal, reverse sweep: dk, dv with the state R held at o_r (the earliest folded offset)
    have_state = false;
    T o_r = 0;
    const std::int64_t last = (pr.len - 1) / c * c;
    for (std::int64_t c0 = last; c0 >= 0; c0 -= c) {
      const std::int64_t n = std::min(c, pr.len - c0);
      pr.keys(b, kv, c0, n, o, e.data(), vx.data());
      pr.decay(c0, n, o, dec.data());
      const T o_new = o[c0];
      if (have_state) {  // later chunks: dE_j = e^(o_j - o_r) R Vx_j, dVx_j = e^(o_j - o_r) R^T E_j
        if (!gemm('N', 'T', n, m, w, T(1), vx.data(), w, rs.data(), w, T(0), de.data(), m)) return false;
        if (!gemm('N', 'N', n, w, m, T(1), e.data(), m, rs.data(), w, T(0), dvx.data(), w)) return false;
        for (std::int64_t r = 0; r < n; ++r) {
          const T f = exp_t(o[c0 + r] - o_r);
          for (std::int64_t j = 0; j < m; ++j) de[r * m + j] *= f;
          for (std::int64_t j = 0; j < w; ++j) dvx[r * w + j] *= f;
        }
        const T f = exp_t(o_new - o_r);
        for (T& x : rs) x *= f;
      } else {
        std::fill(de.begin(), de.end(), T(0));
        std::fill(dvx.begin(), dvx.end(), T(0));
      }
      for (std::int64_t h = h0; h < h1; ++h) {
        pr.queries(b, h, c0, n, phi.data());
        grads(b, h, c0, n, g.data());
        if (!gemm('N', 'T', n, n, w, T(1), g.data(), w, vx.data(), w, T(0), mm.data(), c)) return false;
        pr.apply_decay(mm.data(), dec.data(), n);
        if (!gemm('T', 'N', n, m, n, T(1), mm.data(), c, phi.data(), m, T(1), de.data(), m)) return false;
        if (!gemm('N', 'T', n, n, m, T(1), phi.data(), m, e.data(), m, T(0), p.data(), c)) return false;
        pr.apply_decay(p.data(), dec.data(), n);
        if (!gemm('T', 'N', n, w, n, T(1), p.data(), c, g.data(), w, T(1), dvx.data(), w)) return false;
        for (std::int64_t r = 0; r < n; ++r) {  // fold into R at o_new
          const T f = exp_t(o_new - o[c0 + r]);
          for (std::int64_t j = 0; j < w; ++j) zw[r * w + j] = g[r * w + j] * f;
        }
        if (!gemm('T', 'N', m, w, n, T(1), phi.data(), m, zw.data(), w, T(1), rs.data(), w)) return false;
      }
      write_dkv(b, kv, c0, n, e.data(), de.data(), dvx.data());
      o_r = o_new;
      have_state = true;
    }
    return true;
  };
  const bool ok = run_tasks(pr.batch * pr.hkv, task);
  DARK_CHECK(ok, "linear_attention backward: dnnl_sgemm failed on a chunk (m = ", m, ", Dv = ", dv, ")");
}

DARK_REGISTER_KERNEL(linear_attention_forward, cpu, f32, linear_attention_forward_kernel<float>);
DARK_REGISTER_KERNEL(linear_attention_forward, cpu, f64, linear_attention_forward_kernel<double>);
DARK_REGISTER_KERNEL(linear_attention_backward, cpu, f32, linear_attention_backward_kernel<float>);
DARK_REGISTER_KERNEL(linear_attention_backward, cpu, f64, linear_attention_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
