// CPU random-feature attention with the feature logits computed inside the kernel (see
// core/kernels.h): the logits of one call exist only while it runs (they are not saved for
// the backward, which recomputes them), then the linear-attention kernel runs on them:
//   l[b, t, h, f] = omega[kv(h)] [f] . x[b, t, h] - (|x[b, t, h]|^2 + ln m) / 2 (+ w[kv(h), f])
// Backward: the linear-attention backward gives dl; then dx = dl omega - x rowsum(dl) and
// domega[kv] = sum over the group's query heads, then the key head, of dl^T x, each head's
// product over all (b, t) as one gemm, in that fixed order. One task per head (oneDNN's
// sgemm single-threaded inside), so nothing depends on the thread count.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/cpu/tile_gemm.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

// x: (B, T, H, r) with H = heads; omega (Hkv, m, r); head h uses kv head h / (H / Hkv).
template <class T>
struct Projection {
  const T* x;
  std::int64_t rows, heads, r;  // rows = B T
  const T* omega;
  const T* log_weight;  // (Hkv, m) or nullptr
  std::int64_t m, hkv;

  std::int64_t kv_of(std::int64_t h) const { return h / (heads / hkv); }

  // logits (B, T, H, m) of head h.
  bool logits(std::int64_t h, T* out) const {
    const std::int64_t kv = kv_of(h);
    if (!gemm('N', 'T', rows, m, r, T(1), x + h * r, heads * r, omega + kv * m * r, r, T(0), out + h * m, heads * m))
      return false;
    const T half_log_m = static_cast<T>(0.5 * std::log(static_cast<double>(m)));
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* xr = x + (i * heads + h) * r;
      T ss = 0;
      for (std::int64_t c = 0; c < r; ++c) ss += xr[c] * xr[c];
      const T shift = T(0.5) * ss + half_log_m;
      T* lr = out + (i * heads + h) * m;
      for (std::int64_t f = 0; f < m; ++f) lr[f] -= shift - (log_weight ? log_weight[kv * m + f] : T(0));
    }
    return true;
  }

  // dx of head h from dl (B, T, H, m): dl omega - x rowsum(dl).
  bool input_grad(std::int64_t h, const T* dl, T* dx) const {
    const std::int64_t kv = kv_of(h);
    if (!gemm('N', 'N', rows, r, m, T(1), dl + h * m, heads * m, omega + kv * m * r, r, T(0), dx + h * r, heads * r))
      return false;
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* dlr = dl + (i * heads + h) * m;
      T sum = 0;
      for (std::int64_t f = 0; f < m; ++f) sum += dlr[f];
      const T* xr = x + (i * heads + h) * r;
      T* dxr = dx + (i * heads + h) * r;
      for (std::int64_t c = 0; c < r; ++c) dxr[c] -= xr[c] * sum;
    }
    return true;
  }

  // domega_kv += dl_h^T x_h (m x r).
  bool add_weight_grad(std::int64_t h, const T* dl, T* domega_kv) const {
    return gemm('T', 'N', m, r, rows, T(1), dl + h * m, heads * m, x + h * r, heads * r, T(1), domega_kv, r);
  }
};

template <class T>
Projection<T> projection(const Tensor& x, const Tensor& omega, const Tensor& log_weight) {
  return {x.data<T>(), x.shape()[0] * x.shape()[1], x.shape()[2], x.shape()[3], omega.data<T>(),
          log_weight.defined() ? log_weight.data<T>() : nullptr, omega.shape()[1], omega.shape()[0]};
}

template <class T>
Tensor logits_of(const Projection<T>& p, const Tensor& like) {
  Tensor out = Tensor::empty({like.shape()[0], like.shape()[1], p.heads, p.m}, like.dtype());
  T* po = out.data<T>();
  DARK_CHECK(run_tasks(p.heads, [&](std::int64_t h) { return p.logits(h, po); }),
             "random_feature_attention: dnnl_sgemm failed computing the feature logits");
  return out;
}

template <class T>
void forward_kernel(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega, const Tensor& log_weight,
                    const Tensor& key_mask, Tensor& out, Tensor& den, bool causal, double eps, std::int64_t chunk) {
  const Tensor lq = logits_of(projection<T>(xq, omega, log_weight), xq);
  const Tensor lk = logits_of(projection<T>(xk, omega, log_weight), xk);
  kernels::linear_attention_forward().get(DeviceType::cpu, dtype_of<T>::value)(lq, lk, v, key_mask, out, den, causal,
                                                                              eps, chunk);
}

template <class T>
void backward_kernel(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega, const Tensor& log_weight,
                     const Tensor& key_mask, const Tensor& out, const Tensor& den, const Tensor& dout, Tensor& dxq,
                     Tensor& dxk, Tensor& dv, Tensor& domega, bool causal, std::int64_t chunk) {
  const Projection<T> pq = projection<T>(xq, omega, log_weight), pk = projection<T>(xk, omega, log_weight);
  const Tensor lq = logits_of(pq, xq), lk = logits_of(pk, xk);
  Tensor dlq = Tensor::empty(lq.shape(), lq.dtype()), dlk = Tensor::empty(lk.shape(), lk.dtype());
  kernels::linear_attention_backward().get(DeviceType::cpu, dtype_of<T>::value)(lq, lk, v, key_mask, out, den, dout,
                                                                               dlq, dlk, dv, causal, chunk);
  const T* pdlq = dlq.data<T>();
  const T* pdlk = dlk.data<T>();
  T* pdxq = dxq.data<T>();
  T* pdxk = dxk.data<T>();
  bool ok = run_tasks(pq.heads, [&](std::int64_t h) { return pq.input_grad(h, pdlq, pdxq); }) &&
            run_tasks(pk.heads, [&](std::int64_t h) { return pk.input_grad(h, pdlk, pdxk); });
  if (ok && domega.defined()) {
    T* pdo = domega.data<T>();
    const std::int64_t group = pq.heads / pq.hkv, per = pq.m * pq.r;
    ok = run_tasks(pq.hkv, [&](std::int64_t kv) {
      std::fill(pdo + kv * per, pdo + (kv + 1) * per, T(0));
      for (std::int64_t h = kv * group; h < (kv + 1) * group; ++h)
        if (!pq.add_weight_grad(h, pdlq, pdo + kv * per)) return false;
      return pk.add_weight_grad(kv, pdlk, pdo + kv * per);
    });
  }
  DARK_CHECK(ok, "random_feature_attention backward: dnnl_sgemm failed");
}

DARK_REGISTER_KERNEL(random_feature_attention_forward, cpu, f32, forward_kernel<float>);
DARK_REGISTER_KERNEL(random_feature_attention_forward, cpu, f64, forward_kernel<double>);
DARK_REGISTER_KERNEL(random_feature_attention_backward, cpu, f32, backward_kernel<float>);
DARK_REGISTER_KERNEL(random_feature_attention_backward, cpu, f64, backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
