// The chunked sweeps of CPU linear attention (the shared kernel of Performer / LFK /
// DARKFormer), forward and backward, for either source of feature logits: given tensors
// (linear_attention.cpp) or computed chunk by chunk from x and omega inside the sweep
// (random_feature_attention.cpp), so the fused op never holds the (B, T, H, m) logits.
// Semantics: autograd/ops.h (linear_attention, random_feature_attention).
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
// dq = Phi * dPhi, dk = E * dE (handed to the logit source chunk by chunk), dv = dVx[:, :Dv].
// States are recomputed, never stored: extra memory is O(T) offsets plus
// O(C (C + m + Dv) + m Dv) scratch per thread. Causal sweeps build the offsets as they go
// (the running max needs nothing later), so each sweep reads every chunk's logits once.
// Deterministic: fixed summation order, no atomics, independent of the thread count.
//
// Key padding mask: a padded key j is left out of the offsets and gets E_j = 0, Vx_j = 0 and
// zero decay weights (its logits and values never enter the arithmetic), so it adds nothing
// to any sum and its dk, dv are 0. The offsets are -inf until the first real key, and exp is
// only ever taken of differences of finite offsets: a state that holds no real key yet is
// exact zeros and is never rescaled; a query row whose offset is -inf sees no real key and
// gets out = 0 and G = 0; R stops folding at the first chunk that starts at offset -inf (all
// keys before it are padded, so R has nothing left to reach). Without a mask (or with all
// ones) every branch takes the unmasked path: the same bits.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cpu/linear_attention_problem.h"
#include "core/cpu/parallel.h"

namespace dark::cpu {
namespace {

// out (B, T, Hq, Dv) and the guarded denominator den (B, Hq, T). False if a gemm failed.
template <class T, class Src>
bool forward_sweeps(const Problem<T, Src>& pr, T eps, T* po, T* pden) {
  const bool causal = pr.causal;
  const std::int64_t c = pr.chunk, m = pr.m, w = pr.w, dv = pr.dv;
  // out = num / (den + eps); 0 for a query that sees no real key (num = den = 0).
  auto write_rows = [&](std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, const std::vector<T>& o,
                        const T* y, const T* qoff) {
    for (std::int64_t r = 0; r < n; ++r) {
      const T* yr = y + r * w;
      const T d = yr[dv] + eps;
      T* out_row = po + pr.out_index(b, c0 + r, h);
      if (o[c0 + r] == neg_inf<T>())
        std::fill(out_row, out_row + dv, T(0));
      else
        for (std::int64_t j = 0; j < dv; ++j) out_row[j] = yr[j] / d;
      pden[(b * pr.hq + h) * pr.len + c0 + r] = d;
      pr.write_log_norm(b, h, c0 + r, qoff[r], o[c0 + r], d);
    }
  };
  auto task = [&](std::int64_t i) {
    const std::int64_t kv = i % pr.hkv, b = i / pr.hkv;
    std::vector<T> o(pr.len), e(c * m), vx(c * w), phi(c * m), p(c * c), dec(c * c), y(c * w), z(c * w), qoff(c);
    State<T> s{std::vector<T>(m * w, T(0))};
    if (!causal) {  // S = sum_j E_j^T Vx_j, then Y = Phi S
      pr.bidirectional_offsets(b, kv, o, e.data());
      for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
        const std::int64_t n = std::min(c, pr.len - c0);
        pr.keys(b, kv, c0, n, o, e.data(), vx.data(), false);
        if (!gemm('T', 'N', m, w, n, T(1), e.data(), m, vx.data(), w, T(1), s.mat.data(), w)) return false;
      }
      for (std::int64_t h = kv * pr.group; h < (kv + 1) * pr.group; ++h)
        for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
          const std::int64_t n = std::min(c, pr.len - c0);
          pr.queries(b, h, c0, n, phi.data(), qoff.data());
          if (!gemm('N', 'N', n, w, m, T(1), phi.data(), m, s.mat.data(), w, T(0), y.data(), w)) return false;
          write_rows(b, h, c0, n, o, y.data(), qoff.data());
        }
      return true;
    }
    for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
      const std::int64_t n = std::min(c, pr.len - c0);
      pr.keys(b, kv, c0, n, o, e.data(), vx.data(), true);
      pr.decay(b, c0, n, o, dec.data());
      for (std::int64_t h = kv * pr.group; h < (kv + 1) * pr.group; ++h) {
        pr.queries(b, h, c0, n, phi.data(), qoff.data());
        if (!gemm('N', 'T', n, n, m, T(1), phi.data(), m, e.data(), m, T(0), p.data(), c)) return false;
        pr.apply_decay(p.data(), dec.data(), n);
        if (!gemm('N', 'N', n, w, n, T(1), p.data(), c, vx.data(), w, T(0), y.data(), w)) return false;
        if (s.held) {
          if (!gemm('N', 'N', n, w, m, T(1), phi.data(), m, s.mat.data(), w, T(0), z.data(), w)) return false;
          pr.add_state(c0, n, o, s.at, z.data(), y.data(), w);
        }
        write_rows(b, h, c0, n, o, y.data(), qoff.data());
      }
      if (!pr.fold_keys(b, c0, n, o, e.data(), vx.data(), s)) return false;
    }
    return true;
  };
  return run_tasks(pr.batch * pr.hkv, task);
}

// From the forward's out and den and the output gradient: the logit gradients (to
// pr.src's query_grad / key_grad, with task i = b Hkv + kv's slice domega_parts + i m r
// when domega_parts is not null) and dv (B, T, Hkv, Dv). False if a gemm failed.
template <class T, class Src>
bool backward_sweeps(const Problem<T, Src>& pr, const T* po, const T* pden, const T* pdo, T* pdv, T* domega_parts,
                     std::int64_t domega_part_size) {
  const bool causal = pr.causal;
  const std::int64_t c = pr.chunk, m = pr.m, w = pr.w, dv = pr.dv;
  auto grads = [&](std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, const std::vector<T>& o, T* g) {
    pr.output_grads(po, pden, pdo, b, h, c0, n, o, g);
  };
  auto task = [&](std::int64_t i) {
    const std::int64_t kv = i % pr.hkv, b = i / pr.hkv;
    const std::int64_t h0 = kv * pr.group, h1 = (kv + 1) * pr.group;
    T* domega = domega_parts ? domega_parts + i * domega_part_size : nullptr;
    if (domega) std::fill(domega, domega + domega_part_size, T(0));
    // dPhi and dE are handed over in place (the source may overwrite them)
    auto write_dq = [&](std::int64_t h, std::int64_t c0, std::int64_t n, const T* phi, T* dphi) {
      pr.src.query_grad(b, h, c0, n, phi, dphi, domega);
    };
    auto write_dkv = [&](std::int64_t c0, std::int64_t n, const T* e, T* de, const T* dvx) {
      for (std::int64_t r = 0; r < n; ++r)
        std::copy(dvx + r * w, dvx + r * w + dv, pdv + ((b * pr.len + c0 + r) * pr.hkv + kv) * dv);
      pr.src.key_grad(b, kv, c0, n, e, de, domega);
    };
    std::vector<T> o(pr.len), e(c * m), vx(c * w), phi(c * m), g(c * w), p(c * c), mm(c * c), dec(c * c),
        dphi(c * m), zm(c * m), zw(c * w), de(c * m), dvx(c * w);
    State<T> s{std::vector<T>(m * w, T(0))}, rs{std::vector<T>(m * w, T(0))};
    if (!causal) {
      pr.bidirectional_offsets(b, kv, o, e.data());
      for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {  // S, as in the forward
        const std::int64_t n = std::min(c, pr.len - c0);
        pr.keys(b, kv, c0, n, o, e.data(), vx.data(), false);
        if (!gemm('T', 'N', m, w, n, T(1), e.data(), m, vx.data(), w, T(1), s.mat.data(), w)) return false;
      }
      for (std::int64_t h = h0; h < h1; ++h)  // dPhi = G S^T; R = sum Phi^T G
        for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
          const std::int64_t n = std::min(c, pr.len - c0);
          pr.queries(b, h, c0, n, phi.data());
          grads(b, h, c0, n, o, g.data());
          if (!gemm('N', 'T', n, m, w, T(1), g.data(), w, s.mat.data(), w, T(0), dphi.data(), m)) return false;
          if (!gemm('T', 'N', m, w, n, T(1), phi.data(), m, g.data(), w, T(1), rs.mat.data(), w)) return false;
          write_dq(h, c0, n, phi.data(), dphi.data());
        }
      for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {  // dE = Vx R^T, dVx = E R
        const std::int64_t n = std::min(c, pr.len - c0);
        pr.keys(b, kv, c0, n, o, e.data(), vx.data(), false);
        if (!gemm('N', 'T', n, m, w, T(1), vx.data(), w, rs.mat.data(), w, T(0), de.data(), m)) return false;
        if (!gemm('N', 'N', n, w, m, T(1), e.data(), m, rs.mat.data(), w, T(0), dvx.data(), w)) return false;
        write_dkv(c0, n, e.data(), de.data(), dvx.data());
      }
      return true;
    }
    // causal, forward sweep: dq (recomputing the offsets and S exactly as the forward does)
    for (std::int64_t c0 = 0; c0 < pr.len; c0 += c) {
      const std::int64_t n = std::min(c, pr.len - c0);
      pr.keys(b, kv, c0, n, o, e.data(), vx.data(), true);
      pr.decay(b, c0, n, o, dec.data());
      for (std::int64_t h = h0; h < h1; ++h) {
        pr.queries(b, h, c0, n, phi.data());
        grads(b, h, c0, n, o, g.data());
        if (!gemm('N', 'T', n, n, w, T(1), g.data(), w, vx.data(), w, T(0), mm.data(), c)) return false;
        pr.apply_decay(mm.data(), dec.data(), n);
        if (!gemm('N', 'N', n, m, n, T(1), mm.data(), c, e.data(), m, T(0), dphi.data(), m)) return false;
        if (s.held) {
          if (!gemm('N', 'T', n, m, w, T(1), g.data(), w, s.mat.data(), w, T(0), zm.data(), m)) return false;
          pr.add_state(c0, n, o, s.at, zm.data(), dphi.data(), m);
        }
        write_dq(h, c0, n, phi.data(), dphi.data());
      }
      if (!pr.fold_keys(b, c0, n, o, e.data(), vx.data(), s)) return false;
    }
    // causal, reverse sweep: dk, dv with the state R held at o_R = the offset of the earliest
    // position folded in (so both exp factors below are <= 1)
    const std::int64_t last = (pr.len - 1) / c * c;
    for (std::int64_t c0 = last; c0 >= 0; c0 -= c) {
      const std::int64_t n = std::min(c, pr.len - c0);
      pr.keys(b, kv, c0, n, o, e.data(), vx.data(), false);
      pr.decay(b, c0, n, o, dec.data());
      if (rs.held) {  // later chunks: dE_j = e^(o_j - o_R) R Vx_j, dVx_j = e^(o_j - o_R) R^T E_j
        if (!gemm('N', 'T', n, m, w, T(1), vx.data(), w, rs.mat.data(), w, T(0), de.data(), m)) return false;
        if (!gemm('N', 'N', n, w, m, T(1), e.data(), m, rs.mat.data(), w, T(0), dvx.data(), w)) return false;
        for (std::int64_t r = 0; r < n; ++r) {
          if (!pr.real(b, c0 + r)) continue;  // zero rows (E_j = Vx_j = 0)
          const T f = exp_t(o[c0 + r] - rs.at);
          row::scale(de.data() + r * m, f, m);
          row::scale(dvx.data() + r * w, f, w);
        }
      } else {
        std::fill(de.begin(), de.end(), T(0));
        std::fill(dvx.begin(), dvx.end(), T(0));
      }
      // R moves to o_new = o[c0]. If that is -inf, no key before c0 is real: R (which only
      // reaches earlier keys) is no longer needed, so this chunk is not folded in.
      const T o_new = o[c0];
      const bool fold = o_new != neg_inf<T>();
      if (rs.held && fold) {
        const T f = exp_t(o_new - rs.at);
        row::scale(rs.mat.data(), f, static_cast<std::int64_t>(rs.mat.size()));
      }
      for (std::int64_t h = h0; h < h1; ++h) {
        pr.queries(b, h, c0, n, phi.data());
        grads(b, h, c0, n, o, g.data());
        if (!gemm('N', 'T', n, n, w, T(1), g.data(), w, vx.data(), w, T(0), mm.data(), c)) return false;
        pr.apply_decay(mm.data(), dec.data(), n);
        if (!gemm('T', 'N', n, m, n, T(1), mm.data(), c, phi.data(), m, T(1), de.data(), m)) return false;
        if (!gemm('N', 'T', n, n, m, T(1), phi.data(), m, e.data(), m, T(0), p.data(), c)) return false;
        pr.apply_decay(p.data(), dec.data(), n);
        if (!gemm('T', 'N', n, w, n, T(1), p.data(), c, g.data(), w, T(1), dvx.data(), w)) return false;
        if (!fold) continue;
        for (std::int64_t r = 0; r < n; ++r) {  // fold into R at o_new
          const T f = exp_t(o_new - o[c0 + r]);
          for (std::int64_t j = 0; j < w; ++j) zw[r * w + j] = g[r * w + j] * f;
        }
        if (!gemm('T', 'N', m, w, n, T(1), phi.data(), m, zw.data(), w, T(1), rs.mat.data(), w)) return false;
      }
      write_dkv(c0, n, e.data(), de.data(), dvx.data());
      if (fold) {
        rs.at = o_new;
        rs.held = true;
      }
    }
    return true;
  };
  return run_tasks(pr.batch * pr.hkv, task);
}

}  // namespace
}  // namespace dark::cpu
