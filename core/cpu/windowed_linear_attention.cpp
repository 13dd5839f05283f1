// CPU sliding-window linear attention on feature logits (Gemma 3's local layers under a
// random-feature kind), forward and backward, float32 and float64. Semantics: autograd/ops.h
// (linear_attention with window > 0). Query t sees the real keys j in (t - w, t]:
//   kappa_j = max_f k[j, f]           (each key's own offset; E_j = exp(k_j - kappa_j) <= 1)
//   o_t     = max of kappa_j over t's window  (the window's exact offset; -inf if none real)
//   a_tj    = exp(kappa_j - o_t) Phi_t . E_j, Y_t = sum_j a_tj Vx_j, out_t = num_t / (den_t + eps)
// with Phi_t and Vx_j = [v_j, 1] as in the causal kernel. No prefix state is ever subtracted
// (a difference of prefix sums loses the window's digits in float32 once the prefix is large);
// instead, for a chunk of C queries the key chunks fall in three kinds:
//   middle  key chunks inside every row's window (all their keys precede the chunk and the
//           first is in the last row's window): one state each,
//           S_kc = sum_j exp(kappa_j - omax_kc) E_j^T Vx_j at omax_kc = the chunk's key max,
//           summed into M = sum_kc exp(omax_kc - O) S_kc at O = the max of those omax_kc;
//           row t adds exp(O - o_t) Phi_t M. Every factor is <= 1 (O <= o_t: the middle
//           chunks lie in every row's window), so nothing underflows that the exact sum keeps.
//   masked  the chunk itself and the key chunks that straddle the window's trailing edge:
//           P = Phi E^T times D[t][j] = exp(kappa_j - o_t) on visible keys, 0 elsewhere.
//   hidden  everything else (never touched: O(T (w / C) m Dv + T C (m + Dv)) work in all).
// The states of the last ceil(w / C) + 1 key chunks are kept in a ring (memory O((w / C) m Dv)).
//
// Backward, G_t and dA_tj as in the causal kernel: masked pairs directly; the middle part
// gives dPhi_t += exp(O - o_t) G_t M^T (a forward sweep), and for key chunk kc the reverse
// sweep gathers R_kc = sum over the query chunks qc that hold kc in their middle of
// exp(omax_kc - O_qc) Q_qc, with Q_qc = sum_h sum_{t in qc} exp(O_qc - o_t) Phi_t^T G_t kept in
// a ring; dE_j += exp(kappa_j - omax_kc) Vx_j R^T, dVx_j += exp(kappa_j - omax_kc) E_j R.
// Padded keys: kappa = -inf, E = Vx = 0 and D = 0, so they add nothing and get dk = dv = 0;
// a query without a real key in its window outputs 0 with G = 0. Deterministic: fixed
// summation order, one task per (batch, kv head).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>

#include "core/cpu/linear_attention_problem.h"
#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

enum class Pair { hidden, middle, masked };

// The key-side bookkeeping of one (batch, kv head) task.
template <class T>
struct Window {
  const Problem<T>& pr;
  std::int64_t b, kv, window, chunks;
  std::vector<T> kappa;        // (T): each key's max logit, -inf for a padded key
  std::vector<T> o;            // (T): each query's window offset
  std::vector<T> chunk_max;    // (chunks): max kappa over each key chunk
  std::vector<bool> has_real;  // (chunks): whether the chunk holds a real key

  Window(const Problem<T>& p, std::int64_t b_, std::int64_t kv_, std::int64_t w)
      : pr(p), b(b_), kv(kv_), window(w), chunks((p.len + p.chunk - 1) / p.chunk) {
    kappa.resize(pr.len);
    for (std::int64_t j = 0; j < pr.len; ++j)
      kappa[j] = pr.real(b, j) ? row::max(pr.krow(b, j, kv), pr.m, neg_inf<T>()) : neg_inf<T>();
    // Sliding maximum over (t - w, t]: a deque of positions with decreasing kappa.
    o.resize(pr.len);
    std::deque<std::int64_t> best;
    for (std::int64_t t = 0; t < pr.len; ++t) {
      while (!best.empty() && kappa[best.back()] <= kappa[t]) best.pop_back();
      best.push_back(t);
      if (best.front() <= t - window) best.pop_front();
      o[t] = kappa[best.front()];
    }
    chunk_max.assign(chunks, neg_inf<T>());
    has_real.assign(chunks, false);
    for (std::int64_t j = 0; j < pr.len; ++j) {
      chunk_max[j / pr.chunk] = std::max(chunk_max[j / pr.chunk], kappa[j]);
      if (pr.real(b, j)) has_real[j / pr.chunk] = true;
    }
  }

  std::int64_t start(std::int64_t c) const { return c * pr.chunk; }
  std::int64_t size(std::int64_t c) const { return std::min(pr.chunk, pr.len - c * pr.chunk); }
  // Key chunks that can touch query chunk qc: qc - reach .. qc.
  std::int64_t reach() const { return (window + pr.chunk - 1) / pr.chunk + 1; }

  Pair pair(std::int64_t qc, std::int64_t kc) const {
    if (kc == qc) return Pair::masked;
    if (kc > qc) return Pair::hidden;
    const std::int64_t c0 = start(qc), n = size(qc), k0 = start(kc), nk = size(kc);
    if (k0 + nk - 1 <= c0 - window) return Pair::hidden;  // past the first row's window
    if (k0 >= c0 + n - window) return Pair::middle;       // inside the last row's window
    return Pair::masked;
  }
  // O_qc: the max offset of qc's middle chunks that hold a real key; -inf when none does.
  T middle_offset(std::int64_t qc) const {
    T at = neg_inf<T>();
    for (std::int64_t kc = std::max<std::int64_t>(0, qc - reach()); kc < qc; ++kc)
      if (pair(qc, kc) == Pair::middle && has_real[kc]) at = std::max(at, chunk_max[kc]);
    return at;
  }

  // E (rows at each key's own offset) and Vx of key chunk kc; rows of padded keys are 0.
  void keys(std::int64_t kc, T* e, T* vx) const {
    const std::int64_t k0 = start(kc);
    for (std::int64_t r = 0; r < size(kc); ++r) {
      T* er = e + r * pr.m;
      T* xr = vx + r * pr.w;
      if (!pr.real(b, k0 + r)) {
        std::fill(er, er + pr.m, T(0));
        std::fill(xr, xr + pr.w, T(0));
        continue;
      }
      row::exp_shift(pr.krow(b, k0 + r, kv), kappa[k0 + r], er, pr.m);
      const T* vr = pr.vrow(b, k0 + r, kv);
      std::copy(vr, vr + pr.dv, xr);
      xr[pr.dv] = T(1);
    }
  }
  // D (n x nk, ld chunk) of a masked pair: exp(kappa_j - o_t) where key j is real and in
  // query t's window, else 0.
  void weights(std::int64_t qc, std::int64_t kc, T* d) const {
    const std::int64_t c0 = start(qc), k0 = start(kc), nk = size(kc);
    for (std::int64_t r = 0; r < size(qc); ++r) {
      const std::int64_t t = c0 + r;
      T* dr = d + r * pr.chunk;
      for (std::int64_t c = 0; c < nk; ++c) {
        const std::int64_t j = k0 + c;
        const bool seen = j <= t && j > t - window && pr.real(b, j);
        dr[c] = seen ? exp_t(kappa[j] - o[t]) : T(0);
      }
    }
  }
  // S_kc = sum_j exp(kappa_j - chunk_max) E_j^T Vx_j (m x W); vx is scaled in place.
  bool state(std::int64_t kc, const T* e, T* vx, T* s) const {
    const std::int64_t k0 = start(kc), nk = size(kc);
    for (std::int64_t r = 0; r < nk; ++r)
      if (pr.real(b, k0 + r)) row::scale(vx + r * pr.w, exp_t(kappa[k0 + r] - chunk_max[kc]), pr.w);
    return gemm('T', 'N', pr.m, pr.w, nk, T(1), e, pr.m, vx, pr.w, T(0), s, pr.w);
  }
};

// A ring of m x W matrices indexed by chunk, each with the offset it is held at.
template <class T>
struct Ring {
  std::int64_t slots;
  std::vector<T> mats;
  std::vector<T> at;
  std::vector<bool> held;
  std::int64_t size;
  Ring(std::int64_t n, std::int64_t mat_size) : slots(n), mats(n * mat_size), at(n), held(n, false), size(mat_size) {}
  T* mat(std::int64_t c) { return mats.data() + (c % slots) * size; }
  const T* mat(std::int64_t c) const { return mats.data() + (c % slots) * size; }
};

// The forward sweep's middle part: the states of the key chunks behind the current query
// chunk, and their sum for it.
template <class T>
struct MiddleStates {
  const Window<T>& win;
  Ring<T> ring;
  explicit MiddleStates(const Window<T>& w) : win(w), ring(w.reach() + 1, w.pr.m * w.pr.w) {}

  // Before query chunk qc: key chunk qc - 1's state joins the ring (e, vx: scratch).
  bool advance(std::int64_t qc, T* e, T* vx) {
    if (qc == 0) return true;
    const std::int64_t kc = qc - 1;
    ring.held[kc % ring.slots] = win.has_real[kc];
    if (!win.has_real[kc]) return true;
    win.keys(kc, e, vx);
    return win.state(kc, e, vx, ring.mat(kc));
  }
  // M = sum over qc's middle chunks of exp(omax_kc - O) S_kc into mid (m x W); returns O, or
  // -inf (mid untouched) when no middle chunk holds a real key.
  T sum(std::int64_t qc, std::vector<T>& mid) const {
    const T at = win.middle_offset(qc);
    if (at == neg_inf<T>()) return at;
    std::fill(mid.begin(), mid.end(), T(0));
    for (std::int64_t kc = std::max<std::int64_t>(0, qc - win.reach()); kc < qc; ++kc)
      if (win.pair(qc, kc) == Pair::middle && ring.held[kc % ring.slots])
        row::axpy(mid.data(), ring.mat(kc), exp_t(win.chunk_max[kc] - at), static_cast<std::int64_t>(mid.size()));
    return at;
  }
};

template <class T>
void forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, Tensor& out,
                    Tensor& den, Tensor& log_norm, std::int64_t window, double eps_d, std::int64_t chunk) {
  Problem<T> pr(q, k, v, key_mask, /*causal=*/true, chunk);
  if (log_norm.defined()) pr.log_norm = log_norm.data<T>();
  const T eps = static_cast<T>(eps_d);
  T* po = out.data<T>();
  T* pden = den.data<T>();
  const std::int64_t c = pr.chunk, m = pr.m, w = pr.w, dv = pr.dv, group = pr.group;
  auto task = [&](std::int64_t i) {
    const std::int64_t kv = i % pr.hkv, b = i / pr.hkv, h0 = kv * group;
    const Window<T> win(pr, b, kv, window);
    MiddleStates<T> states(win);
    std::vector<T> e(c * m), vx(c * w), d(c * c), p(c * c), mid(m * w), z(c * w);
    std::vector<T> phi(group * c * m), y(group * c * w), qoff(group * c);
    for (std::int64_t qc = 0; qc < win.chunks; ++qc) {
      const std::int64_t c0 = win.start(qc), n = win.size(qc);
      if (!states.advance(qc, e.data(), vx.data())) return false;
      for (std::int64_t g = 0; g < group; ++g) pr.queries(b, h0 + g, c0, n, phi.data() + g * c * m, qoff.data() + g * c);
      std::fill(y.begin(), y.end(), T(0));
      const std::int64_t first = std::max<std::int64_t>(0, qc - win.reach());
      for (std::int64_t kc = first; kc <= qc; ++kc) {
        if (win.pair(qc, kc) != Pair::masked) continue;
        const std::int64_t nk = win.size(kc);
        win.keys(kc, e.data(), vx.data());
        win.weights(qc, kc, d.data());
        for (std::int64_t g = 0; g < group; ++g) {
          if (!gemm('N', 'T', n, nk, m, T(1), phi.data() + g * c * m, m, e.data(), m, T(0), p.data(), c)) return false;
          for (std::int64_t r = 0; r < n; ++r) row::mul(p.data() + r * c, p.data() + r * c, d.data() + r * c, nk);
          if (!gemm('N', 'N', n, w, nk, T(1), p.data(), c, vx.data(), w, T(1), y.data() + g * c * w, w)) return false;
        }
      }
      const T at = states.sum(qc, mid);
      if (at != neg_inf<T>()) {
        for (std::int64_t g = 0; g < group; ++g) {
          if (!gemm('N', 'N', n, w, m, T(1), phi.data() + g * c * m, m, mid.data(), w, T(0), z.data(), w)) return false;
          for (std::int64_t r = 0; r < n; ++r)
            row::axpy(y.data() + g * c * w + r * w, z.data() + r * w, exp_t(at - win.o[c0 + r]), w);
        }
      }
      for (std::int64_t g = 0; g < group; ++g) {
        const std::int64_t h = h0 + g;
        for (std::int64_t r = 0; r < n; ++r) {
          const T* yr = y.data() + g * c * w + r * w;
          const T dn = yr[dv] + eps;
          T* out_row = po + pr.out_index(b, c0 + r, h);
          if (win.o[c0 + r] == neg_inf<T>())
            std::fill(out_row, out_row + dv, T(0));
          else
            for (std::int64_t j = 0; j < dv; ++j) out_row[j] = yr[j] / dn;
          pden[(b * pr.hq + h) * pr.len + c0 + r] = dn;
          pr.write_log_norm(b, h, c0 + r, qoff[g * c + r], win.o[c0 + r], dn);
        }
      }
    }
    return true;
  };
  DARK_CHECK(run_tasks(pr.batch * pr.hkv, task), "linear_attention (window ", window,
             "): dnnl_sgemm failed on a chunk (m = ", m, ", Dv = ", dv, ")");
}

template <class T>
void backward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, const Tensor& out,
                     const Tensor& den, const Tensor& dout, const Tensor& dlog_norm, Tensor& dq, Tensor& dk,
                     Tensor& dv_t, std::int64_t window, std::int64_t chunk) {
  Problem<T> pr(q, k, v, key_mask, /*causal=*/true, chunk);
  if (dlog_norm.defined()) pr.dlog_norm = dlog_norm.data<T>();
  const T* po = out.data<T>();
  const T* pden = den.data<T>();
  const T* pdo = dout.data<T>();
  T* pdq = dq.data<T>();
  T* pdk = dk.data<T>();
  T* pdv = dv_t.data<T>();
  const std::int64_t c = pr.chunk, m = pr.m, w = pr.w, dv = pr.dv, group = pr.group;
  auto task = [&](std::int64_t i) {
    const std::int64_t kv = i % pr.hkv, b = i / pr.hkv, h0 = kv * group;
    const Window<T> win(pr, b, kv, window);
    std::vector<T> e(c * m), vx(c * w), d(c * c), p(c * c), mm(c * c), mid(m * w), zm(c * m), zw(c * w);
    std::vector<T> phi(group * c * m), g(group * c * w), dphi(c * m), de(c * m), dvx(c * w);
    // Phi and G of every query head of the group for query chunk qc.
    auto query_side = [&](std::int64_t qc) {
      const std::int64_t c0 = win.start(qc), n = win.size(qc);
      for (std::int64_t hg = 0; hg < group; ++hg) {
        pr.queries(b, h0 + hg, c0, n, phi.data() + hg * c * m);
        pr.output_grads(po, pden, pdo, b, h0 + hg, c0, n, win.o, g.data() + hg * c * w);
      }
    };

    // Forward sweep: dq.
    MiddleStates<T> states(win);
    for (std::int64_t qc = 0; qc < win.chunks; ++qc) {
      const std::int64_t c0 = win.start(qc), n = win.size(qc);
      if (!states.advance(qc, e.data(), vx.data())) return false;
      query_side(qc);
      const std::int64_t first = std::max<std::int64_t>(0, qc - win.reach());
      const T at = states.sum(qc, mid);
      for (std::int64_t hg = 0; hg < group; ++hg) {
        const T* gh = g.data() + hg * c * w;
        std::fill(dphi.begin(), dphi.end(), T(0));
        for (std::int64_t kc = first; kc <= qc; ++kc) {
          if (win.pair(qc, kc) != Pair::masked) continue;
          const std::int64_t nk = win.size(kc);
          win.keys(kc, e.data(), vx.data());
          win.weights(qc, kc, d.data());
          if (!gemm('N', 'T', n, nk, w, T(1), gh, w, vx.data(), w, T(0), mm.data(), c)) return false;
          for (std::int64_t r = 0; r < n; ++r) row::mul(mm.data() + r * c, mm.data() + r * c, d.data() + r * c, nk);
          if (!gemm('N', 'N', n, m, nk, T(1), mm.data(), c, e.data(), m, T(1), dphi.data(), m)) return false;
        }
        if (at != neg_inf<T>()) {
          if (!gemm('N', 'T', n, m, w, T(1), gh, w, mid.data(), w, T(0), zm.data(), m)) return false;
          for (std::int64_t r = 0; r < n; ++r)
            row::axpy(dphi.data() + r * m, zm.data() + r * m, exp_t(at - win.o[c0 + r]), m);
        }
        for (std::int64_t r = 0; r < n; ++r)
          row::mul(pdq + ((b * pr.len + c0 + r) * pr.hq + h0 + hg) * m, phi.data() + hg * c * m + r * m,
                   dphi.data() + r * m, m);
      }
    }

    // Reverse sweep: dk, dv. Q_qc enters the ring when key chunk qc - 1 is reached.
    Ring<T> gathered(win.reach() + 1, m * w);
    for (std::int64_t kc = win.chunks - 1; kc >= 0; --kc) {
      const std::int64_t k0 = win.start(kc), nk = win.size(kc);
      if (kc + 1 < win.chunks) {
        const std::int64_t qc = kc + 1, c0 = win.start(qc), n = win.size(qc);
        const T at = win.middle_offset(qc);
        gathered.held[qc % gathered.slots] = at != neg_inf<T>();
        gathered.at[qc % gathered.slots] = at;
        if (at != neg_inf<T>()) {
          query_side(qc);
          T* qm = gathered.mat(qc);
          std::fill(qm, qm + m * w, T(0));
          for (std::int64_t hg = 0; hg < group; ++hg) {
            const T* gh = g.data() + hg * c * w;
            for (std::int64_t r = 0; r < n; ++r) {
              const T f = win.o[c0 + r] == neg_inf<T>() ? T(0) : exp_t(at - win.o[c0 + r]);
              for (std::int64_t j = 0; j < w; ++j) zw[r * w + j] = gh[r * w + j] * f;
            }
            if (!gemm('T', 'N', m, w, n, T(1), phi.data() + hg * c * m, m, zw.data(), w, T(1), qm, w)) return false;
          }
        }
      }
      win.keys(kc, e.data(), vx.data());
      std::fill(de.begin(), de.end(), T(0));
      std::fill(dvx.begin(), dvx.end(), T(0));
      const std::int64_t last = std::min(win.chunks - 1, kc + win.reach());
      if (win.has_real[kc]) {
        std::fill(mid.begin(), mid.end(), T(0));
        bool any = false;
        for (std::int64_t qc = kc + 1; qc <= last; ++qc)
          if (win.pair(qc, kc) == Pair::middle && gathered.held[qc % gathered.slots]) {
            row::axpy(mid.data(), gathered.mat(qc), exp_t(win.chunk_max[kc] - gathered.at[qc % gathered.slots]), m * w);
            any = true;
          }
        if (any) {
          if (!gemm('N', 'T', nk, m, w, T(1), vx.data(), w, mid.data(), w, T(0), de.data(), m)) return false;
          if (!gemm('N', 'N', nk, w, m, T(1), e.data(), m, mid.data(), w, T(0), dvx.data(), w)) return false;
          for (std::int64_t r = 0; r < nk; ++r) {
            if (!pr.real(b, k0 + r)) continue;  // zero rows
            const T f = exp_t(win.kappa[k0 + r] - win.chunk_max[kc]);
            row::scale(de.data() + r * m, f, m);
            row::scale(dvx.data() + r * w, f, w);
          }
        }
      }
      for (std::int64_t qc = kc; qc <= last; ++qc) {
        if (win.pair(qc, kc) != Pair::masked) continue;
        const std::int64_t n = win.size(qc);
        query_side(qc);
        win.weights(qc, kc, d.data());
        for (std::int64_t hg = 0; hg < group; ++hg) {
          const T* gh = g.data() + hg * c * w;
          const T* ph = phi.data() + hg * c * m;
          if (!gemm('N', 'T', n, nk, w, T(1), gh, w, vx.data(), w, T(0), mm.data(), c)) return false;
          for (std::int64_t r = 0; r < n; ++r) row::mul(mm.data() + r * c, mm.data() + r * c, d.data() + r * c, nk);
          if (!gemm('T', 'N', nk, m, n, T(1), mm.data(), c, ph, m, T(1), de.data(), m)) return false;
          if (!gemm('N', 'T', n, nk, m, T(1), ph, m, e.data(), m, T(0), p.data(), c)) return false;
          for (std::int64_t r = 0; r < n; ++r) row::mul(p.data() + r * c, p.data() + r * c, d.data() + r * c, nk);
          if (!gemm('T', 'N', nk, w, n, T(1), p.data(), c, gh, w, T(1), dvx.data(), w)) return false;
        }
      }
      for (std::int64_t r = 0; r < nk; ++r) {
        row::mul(pdk + ((b * pr.len + k0 + r) * pr.hkv + kv) * m, e.data() + r * m, de.data() + r * m, m);
        std::copy(dvx.data() + r * w, dvx.data() + r * w + dv, pdv + ((b * pr.len + k0 + r) * pr.hkv + kv) * dv);
      }
    }
    return true;
  };
  DARK_CHECK(run_tasks(pr.batch * pr.hkv, task), "linear_attention backward (window ", window,
             "): dnnl_sgemm failed on a chunk (m = ", m, ", Dv = ", dv, ")");
}

DARK_REGISTER_KERNEL(windowed_linear_attention_forward, cpu, f32, forward_kernel<float>);
DARK_REGISTER_KERNEL(windowed_linear_attention_forward, cpu, f64, forward_kernel<double>);
DARK_REGISTER_KERNEL(windowed_linear_attention_backward, cpu, f32, backward_kernel<float>);
DARK_REGISTER_KERNEL(windowed_linear_attention_backward, cpu, f64, backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
