// The exact window on a global layer as one tape entry (semantics: autograd/ops.h,
// random_feature_attention_exact_window; the composition it equals: attention/exact_window.h).
//
// Forward: the flash kernel over the window (its out and lse, written straight into the
// result's buffers) and the fused random-feature kernel on the sequence shifted by W (its out,
// den and log normaliser); rows t >= W are then merged in place into out and the merged log
// normaliser L. Saved: x_q, x_k, v, omega, out, L and each far row's equivalent denominator, not
// the two parts' outputs. Backward: each kernel's own backward, given the merged quantities
// (the features' first, then flash's added to their gradients in place):
//   flash with lse = L: P = exp(s - L) is the merged softmax's probability of a near key, and
//     D = rowsum(dO out) its FlashAttention-2 statistic, so dS = P (dP - D) is exact;
//   the features with den = exp(L - qoff - o): their G = [dO / den, -(dO . out) / den] is then
//     the merged output's gradient of their offset-scaled weights (d out / d a = e^(qoff + o)
//     (v - out) / e^L).
// So nothing of the merge is differentiated, and no (B, T, H, Dv) tensor beyond out is kept.
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

// Rows [begin, end) of the sequence axis (axis 1 of (B, T, ...)), contiguous.
Tensor rows(const Tensor& x, std::int64_t begin, std::int64_t end) {
  return x.defined() ? core::slice(x, 1, begin, end).contiguous() : Tensor();
}

// The shifted far problem: queries W.., keys and values ..T - W (key mask likewise).
struct FarInputs {
  Tensor xq, xk, v, mask;
  FarInputs(const Tensor& xq_, const Tensor& xk_, const Tensor& v_, const Tensor& mask_, std::int64_t window) {
    const std::int64_t T = xq_.size(1), n = T - window;
    xq = rows(xq_, window, T), xk = rows(xk_, 0, n), v = rows(v_, 0, n), mask = rows(mask_, 0, n);
  }
};

// Rows t >= W of (out, L) (near values in place) merged with the far part's (far_out, far_norm):
// out by merge_attention (not recorded), L = logaddexp(L, far_norm). Returns
// the far rows' equivalent denominator den_far exp(L_merged - far_norm), in den_far's dtype.
Tensor merge_rows(Tensor& out, Tensor& norm, const Tensor& far_out, const Tensor& far_den, const Tensor& far_norm,
                  std::int64_t window) {
  NoGradGuard no_grad;
  const std::int64_t T = out.size(1);
  Tensor out_tail = core::slice(out, 1, window, T), norm_tail = core::slice(norm, 2, window, T);
  const Tensor near_norm = norm_tail.contiguous();
  const DType dt = near_norm.dtype();
  const Tensor neg_inf = Tensor::scalar(-std::numeric_limits<double>::infinity(), dt, near_norm.device());
  out_tail.copy_(merge_attention({out_tail, near_norm}, {far_out, far_norm}));
  // logaddexp; -inf where neither part saw a key
  const Tensor top = maximum(near_norm, far_norm);
  const Tensor none = eq(top, neg_inf);
  const Tensor safe_top = masked_fill(top, none, 0.0);
  Tensor merged = add(safe_top, log(add(exp(sub(near_norm, safe_top)), exp(sub(far_norm, safe_top)))));
  merged = masked_fill(merged, none, -std::numeric_limits<double>::infinity());
  norm_tail.copy_(merged);
  // A row with no far key (far_norm = -inf) gets G = 0 in the kernel whatever its den: 1 there.
  const Tensor no_far = eq(far_norm, neg_inf);
  const Tensor ratio = masked_fill(exp(sub(merged, masked_fill(far_norm, no_far, 0.0))), no_far, 1.0);
  return mul(far_den.to(dt), ratio).to(far_den.dtype()).contiguous();
}

// A zero (B, T, H, width) gradient with `part` (B, n, H, w <= width) in rows [begin, begin + n),
// columns [0, w). `part` is released before returning, so at most one full-length gradient and
// the far parts are alive at once.
Tensor place_rows(Tensor part, const std::vector<std::int64_t>& shape, std::int64_t begin) {
  Tensor full = Tensor::empty(shape, part.dtype(), part.device());
  full.fill_(0.0);
  core::slice(core::slice(full, 1, begin, begin + part.size(1)), 3, 0, part.size(3)).copy_(part);
  return full;
}

}  // namespace

Tensor random_feature_attention_exact_window(const Tensor& xq_in, const Tensor& xk_in, const Tensor& v_in,
                                             const Tensor& omega_in, const Tensor& log_weight_in, std::int64_t window,
                                             double eps, std::int64_t chunk, const Tensor& key_mask) {
  const char* name = "random_feature_attention_exact_window";
  ops_detail::check_floating(name, xq_in);
  for (const Tensor* t : {&xk_in, &v_in, &omega_in}) ops_detail::check_same(name, xq_in, *t);
  DARK_CHECK(xq_in.dim() == 4 && xk_in.dim() == 4 && v_in.dim() == 4 && omega_in.dim() == 3 &&
                 xq_in.size(1) == xk_in.size(1) && xq_in.size(3) == xk_in.size(3) && xq_in.size(3) <= v_in.size(3),
             name, ": expected x_q (B, T, Hq, r), x_k (B, T, Hkv, r), v (B, T, Hkv, Dv) with r <= Dv and omega (Hkv, m, r), ",
             "got ", xq_in.describe(), ", ", xk_in.describe(), ", ", v_in.describe(), ", ", omega_in.describe());
  const std::int64_t B = xq_in.size(0), T = xq_in.size(1), hq = xq_in.size(2), r = xq_in.size(3), dv = v_in.size(3);
  DARK_CHECK(window >= 1 && window < T, name, ": window must be in [1, T) = [1, ", T, "), got ", window,
             " (a window of T or more is exact attention: the flash op)");
  const std::int64_t n = T - window;
  const Tensor xq = xq_in.contiguous(), xk = xk_in.contiguous(), v = v_in.contiguous(), omega = omega_in.contiguous();
  const Tensor log_weight = log_weight_in.defined() ? log_weight_in.detach().contiguous() : Tensor();
  const Tensor mask = ops_detail::kernel_key_mask(key_mask);
  const DType dt = xq.dtype();
  const Device dev = xq.device();

  Tensor out = Tensor::empty({B, T, hq, dv}, dt, dev), norm = Tensor::empty({B, hq, T}, grad_dtype(dt), dev);
  kernels::flash_attention_forward().get(dev.type, dt)(pad_last_dim(xq.detach(), dv), pad_last_dim(xk.detach(), dv), v,
                                                      mask, out, norm, /*causal=*/true, 1.0, window);
  Tensor den_equiv;
  {
    const FarInputs far(xq, xk, v, mask, window);
    Tensor far_out = Tensor::empty({B, n, hq, dv}, dt, dev), far_den = Tensor::empty({B, hq, n}, dt, dev);
    Tensor far_norm = Tensor::empty({B, hq, n}, grad_dtype(dt), dev);
    kernels::random_feature_attention_forward().get(dev.type, dt)(far.xq, far.xk, far.v, omega, log_weight, far.mask,
                                                                 far_out, far_den, far_norm, /*causal=*/true, eps,
                                                                 chunk);
    den_equiv = merge_rows(out, norm, far_out, far_den, far_norm, window);
  }
  if (should_record({&xq_in, &xk_in, &v_in, &omega_in})) {
    record(name, {xq_in, xk_in, v_in, omega_in}, {&out},
           [xq = xq.detach(), xk = xk.detach(), v = v.detach(), omega = omega.detach(), log_weight, mask,
            out = out.detach(), norm, den_equiv, window, chunk, r, dv](BackwardContext& g) {
             NoGradGuard no_grad;
             const Tensor dout = g.out_grad().contiguous();
             const DType dt = xq.dtype();
             const Device dev = xq.device();
             const std::int64_t B = xq.size(0), T = xq.size(1);
             // far keys first: the features' backward on the shifted rows, each gradient then
             // placed into a full-length one (flash's widths)
             Tensor dq, dk, dv_all;
             Tensor domega = g.needs_grad(3) ? Tensor::empty(omega.shape(), dt, dev) : Tensor();
             {
               const FarInputs far(xq, xk, v, mask, window);
               Tensor dxq = Tensor::empty(far.xq.shape(), dt, dev), dxk = Tensor::empty(far.xk.shape(), dt, dev);
               Tensor dvf = Tensor::empty(far.v.shape(), dt, dev);
               kernels::random_feature_attention_backward().get(dev.type, dt)(
                   far.xq, far.xk, far.v, omega, log_weight, far.mask, rows(out, window, T), den_equiv,
                   rows(dout, window, T), Tensor(), dxq, dxk, dvf, domega, /*causal=*/true, chunk);
               dq = place_rows(std::move(dxq), {B, T, xq.size(2), dv}, window);
               dk = place_rows(std::move(dxk), {B, T, xk.size(2), dv}, 0);
               dv_all = place_rows(std::move(dvf), v.shape(), 0);
             }
             // near keys: flash's backward with the merged out and normaliser, added to them
             kernels::flash_attention_backward().get(dev.type, dt)(pad_last_dim(xq, dv), pad_last_dim(xk, dv), v, mask,
                                                                  out, norm, dout, Tensor(), dq, dk, dv_all,
                                                                  /*causal=*/true, 1.0, window, /*accumulate=*/true);
             if (r < dv) dq = core::slice(dq, 3, 0, r).contiguous(), dk = core::slice(dk, 3, 0, r).contiguous();
             if (g.needs_grad(0)) g.set_input_grad(0, dq);
             if (g.needs_grad(1)) g.set_input_grad(1, dk);
             if (g.needs_grad(2)) g.set_input_grad(2, dv_all);
             if (domega.defined()) g.set_input_grad(3, domega);
           });
  }
  return out;
}

}  // namespace dark
