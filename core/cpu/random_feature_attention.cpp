// CPU random-feature attention with the feature logits computed inside the sweeps of
// linear_attention_sweeps.h (see core/kernels.h): each chunk's logits
//   l[b, t, h, f] = omega[kv(h)] [f] . x[b, t, h] - (|x[b, t, h]|^2 + ln m) / 2 (+ w[kv(h), f])
// are made from x and omega when a sweep reaches the chunk (one n x m x r gemm into the
// chunk's own Phi or E buffer) and are never stored for the sequence: a pass holds
// O(T (r + Dv)) plus per-thread chunk scratch, whatever m is. The backward turns each
// chunk's logit gradient dl at once into dx = dl omega - x rowsum(dl) and adds dl^T x to its
// task's slice of domega; the slices (one per (batch, kv head)) are summed in batch order,
// so no result depends on the thread count.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cpu/linear_attention_sweeps.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

// The logit source of the fused op (the counterpart of GivenLogits): x_q (B, T, Hq, r),
// x_k (B, T, Hkv, r), omega (Hkv, m, r), log_weight (Hkv, m) or none; query head h uses
// kv head h / (Hq / Hkv).
template <class T>
struct ComputedLogits {
  const T *xq, *xk, *omega, *log_weight;
  std::int64_t len, hq, hkv, r, m;
  T half_log_m;
  T *dxq = nullptr, *dxk = nullptr;  // backward only

  const T* query_rows(std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, T* buf,
                      std::int64_t& ld) const {
    ld = m;
    logits(xq + ((b * len + c0) * hq + h) * r, hq * r, h / (hq / hkv), n, buf);
    return buf;
  }
  const T* key_rows(std::int64_t b, std::int64_t kv, std::int64_t c0, std::int64_t n, T* buf,
                    std::int64_t& ld) const {
    ld = m;
    logits(xk + ((b * len + c0) * hkv + kv) * r, hkv * r, kv, n, buf);
    return buf;
  }
  void query_grad(std::int64_t b, std::int64_t h, std::int64_t c0, std::int64_t n, const T* a, T* da,
                  T* domega) const {
    const std::int64_t at = ((b * len + c0) * hq + h) * r;
    project_back(xq + at, dxq + at, hq * r, h / (hq / hkv), n, a, da, domega);
  }
  void key_grad(std::int64_t b, std::int64_t kv, std::int64_t c0, std::int64_t n, const T* a, T* da,
                T* domega) const {
    const std::int64_t at = ((b * len + c0) * hkv + kv) * r;
    project_back(xk + at, dxk + at, hkv * r, kv, n, a, da, domega);
  }

 private:
  // out (n x m) = the logits of the n rows x (stride ldx) against omega[kv].
  void logits(const T* x, std::int64_t ldx, std::int64_t kv, std::int64_t n, T* out) const {
    DARK_CHECK(gemm('N', 'T', n, m, r, T(1), x, ldx, omega + kv * m * r, r, T(0), out, m),
               "random_feature_attention: dnnl_sgemm failed computing a chunk's feature logits");
    const T* lw = log_weight ? log_weight + kv * m : nullptr;
    for (std::int64_t i = 0; i < n; ++i) {
      const T* xr = x + i * ldx;
      T ss = 0;
      for (std::int64_t c = 0; c < r; ++c) ss += xr[c] * xr[c];
      const T shift = T(0.5) * ss + half_log_m;
      T* lr = out + i * m;
      for (std::int64_t f = 0; f < m; ++f) lr[f] -= shift - (lw ? lw[f] : T(0));
    }
  }
  // dl = a * da (in place in da), then dx = dl omega[kv] - x rowsum(dl) and domega += dl^T x.
  void project_back(const T* x, T* dx, std::int64_t ld, std::int64_t kv, std::int64_t n, const T* a, T* dl,
                    T* domega) const {
    for (std::int64_t i = 0; i < n; ++i) row::mul(dl + i * m, a + i * m, dl + i * m, m);
    DARK_CHECK(gemm('N', 'N', n, r, m, T(1), dl, m, omega + kv * m * r, r, T(0), dx, ld),
               "random_feature_attention backward: dnnl_sgemm failed on a chunk's input gradient");
    for (std::int64_t i = 0; i < n; ++i) {
      const T* dlr = dl + i * m;
      T sum = 0;
      for (std::int64_t f = 0; f < m; ++f) sum += dlr[f];
      const T* xr = x + i * ld;
      T* dxr = dx + i * ld;
      for (std::int64_t c = 0; c < r; ++c) dxr[c] -= xr[c] * sum;
    }
    if (domega)
      DARK_CHECK(gemm('T', 'N', m, r, n, T(1), dl, m, x, ld, T(1), domega, r),
                 "random_feature_attention backward: dnnl_sgemm failed on a chunk's omega gradient");
  }
};

template <class T>
Problem<T, ComputedLogits<T>> problem(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                                      const Tensor& log_weight, const Tensor& key_mask, bool causal,
                                      std::int64_t chunk) {
  const std::int64_t batch = xq.shape()[0], len = xq.shape()[1], hq = xq.shape()[2], hkv = xk.shape()[2];
  const std::int64_t m = omega.shape()[1];
  const ComputedLogits<T> src{xq.data<T>(),
                              xk.data<T>(),
                              omega.data<T>(),
                              log_weight.defined() ? log_weight.data<T>() : nullptr,
                              len,
                              hq,
                              hkv,
                              xq.shape()[3],
                              m,
                              static_cast<T>(0.5 * std::log(static_cast<double>(m)))};
  return {src, batch, len, hq, hkv, m, v, key_mask, causal, chunk};
}

template <class T>
void forward_kernel(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega, const Tensor& log_weight,
                    const Tensor& key_mask, Tensor& out, Tensor& den, Tensor& log_norm, bool causal, double eps,
                    std::int64_t chunk) {
  auto pr = problem<T>(xq, xk, v, omega, log_weight, key_mask, causal, chunk);
  if (log_norm.defined()) pr.log_norm = log_norm.data<T>();
  DARK_CHECK(forward_sweeps(pr, static_cast<T>(eps), out.data<T>(), den.data<T>()),
             "random_feature_attention: dnnl_sgemm failed on a chunk (m = ", pr.m, ", Dv = ", pr.dv, ")");
}

template <class T>
void backward_kernel(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega, const Tensor& log_weight,
                     const Tensor& key_mask, const Tensor& out, const Tensor& den, const Tensor& dout,
                     const Tensor& dlog_norm, Tensor& dxq, Tensor& dxk, Tensor& dv, Tensor& domega, bool causal,
                     std::int64_t chunk) {
  auto pr = problem<T>(xq, xk, v, omega, log_weight, key_mask, causal, chunk);
  if (dlog_norm.defined()) pr.dlog_norm = dlog_norm.data<T>();
  pr.src.dxq = dxq.data<T>();
  pr.src.dxk = dxk.data<T>();
  const std::int64_t part = pr.m * pr.src.r;
  std::vector<T> parts(domega.defined() ? pr.batch * pr.hkv * part : 0);  // one slice per task (b, kv)
  DARK_CHECK(backward_sweeps(pr, out.data<T>(), den.data<T>(), dout.data<T>(), dv.data<T>(),
                             domega.defined() ? parts.data() : nullptr, part),
             "random_feature_attention backward: dnnl_sgemm failed on a chunk (m = ", pr.m, ", Dv = ", pr.dv, ")");
  if (!domega.defined()) return;
  T* pdo = domega.data<T>();
  for (std::int64_t kv = 0; kv < pr.hkv; ++kv) {
    T* d = pdo + kv * part;
    std::copy(parts.begin() + kv * part, parts.begin() + (kv + 1) * part, d);
    for (std::int64_t b = 1; b < pr.batch; ++b) row::axpy(d, parts.data() + (b * pr.hkv + kv) * part, T(1), part);
  }
}

DARK_REGISTER_KERNEL(random_feature_attention_forward, cpu, f32, forward_kernel<float>);
DARK_REGISTER_KERNEL(random_feature_attention_forward, cpu, f64, forward_kernel<double>);
DARK_REGISTER_KERNEL(random_feature_attention_backward, cpu, f32, backward_kernel<float>);
DARK_REGISTER_KERNEL(random_feature_attention_backward, cpu, f64, backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
