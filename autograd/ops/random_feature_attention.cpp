// Random-feature attention with in-kernel feature logits (semantics: autograd/ops.h), one
// tape entry. It saves its inputs, the output and the guarded denominator; the backward
// kernel recomputes the logits chunk by chunk.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

// The op, with the log normaliser as a second output when want_norm.
NormalizedAttention random_feature_attention_op(const Tensor& xq_in, const Tensor& xk_in, const Tensor& v_in,
                                                const Tensor& omega_in, const Tensor& log_weight_in, bool causal,
                                                double eps, std::int64_t chunk, const Tensor& key_mask,
                                                bool want_norm) {
  const char* name = "random_feature_attention";
  ops_detail::check_floating(name, xq_in);
  for (const Tensor* t : {&xk_in, &v_in, &omega_in}) ops_detail::check_same(name, xq_in, *t);
  DARK_CHECK(xq_in.dim() == 4 && xk_in.dim() == 4 && v_in.dim() == 4 && omega_in.dim() == 3, name,
             ": x_q must be (B, T, Hq, r), x_k (B, T, Hkv, r), v (B, T, Hkv, Dv) and omega (Hkv, m, r), got x_q ",
             xq_in.describe(), ", x_k ", xk_in.describe(), ", v ", v_in.describe(), ", omega ", omega_in.describe());
  const std::int64_t batch = xq_in.size(0), len = xq_in.size(1), hq = xq_in.size(2), r = xq_in.size(3);
  const std::int64_t hkv = xk_in.size(2), m = omega_in.size(1), dv = v_in.size(3);
  DARK_CHECK(xk_in.size(0) == batch && xk_in.size(1) == len && xk_in.size(3) == r && v_in.size(0) == batch &&
                 v_in.size(1) == len && v_in.size(2) == hkv && omega_in.size(0) == hkv && omega_in.size(2) == r,
             name, ": shapes do not agree: x_q ", xq_in.describe(), ", x_k ", xk_in.describe(), ", v ", v_in.describe(),
             ", omega ", omega_in.describe(), " (omega must be (Hkv, m, r))");
  DARK_CHECK(m > 0 && dv > 0 && r > 0, name, ": feature count, value and transformed dimensions must be positive");
  DARK_CHECK(hkv > 0 && hq % hkv == 0, name, ": query heads (", hq, ") must be a multiple of key/value heads (", hkv, ")");
  DARK_CHECK(chunk >= 1 && eps >= 0, name, ": chunk must be >= 1 and eps >= 0, got ", chunk, ", ", eps);
  DARK_CHECK(!log_weight_in.defined() || (log_weight_in.dim() == 2 && log_weight_in.size(0) == hkv &&
                                           log_weight_in.size(1) == m && log_weight_in.dtype() == xq_in.dtype() &&
                                           log_weight_in.device() == xq_in.device()),
             name, ": log_weight must be (Hkv, m) = (", hkv, ", ", m, ") like x_q, got ", log_weight_in.describe());
  DARK_CHECK(!key_mask.defined() || (key_mask.dim() == 2 && key_mask.size(0) == batch && key_mask.size(1) == len &&
                                      key_mask.device() == xq_in.device()),
             name, ": key_mask must be (B, T) on x_q's device, got ", key_mask.describe());
  const Tensor xq = xq_in.contiguous(), xk = xk_in.contiguous(), v = v_in.contiguous(), omega = omega_in.contiguous();
  const Tensor log_weight = log_weight_in.defined() ? log_weight_in.detach().contiguous() : Tensor();
  const Tensor mask = ops_detail::kernel_key_mask(key_mask);
  Tensor out = Tensor::empty({batch, len, hq, dv}, xq.dtype(), xq.device());
  Tensor den = Tensor::empty({batch, hq, len}, xq.dtype(), xq.device());
  Tensor log_norm = want_norm ? Tensor::empty({batch, hq, len}, grad_dtype(xq.dtype()), xq.device()) : Tensor();
  if (len > 0)
    kernels::random_feature_attention_forward().get(xq.device().type, xq.dtype())(xq, xk, v, omega, log_weight, mask,
                                                                                 out, den, log_norm, causal, eps, chunk);
  if (should_record({&xq_in, &xk_in, &v_in, &omega_in})) {
    std::vector<Tensor*> outputs{&out};
    if (want_norm) outputs.push_back(&log_norm);
    record(name, {xq_in, xk_in, v_in, omega_in}, outputs,
           [xq = xq.detach(), xk = xk.detach(), v = v.detach(), omega = omega.detach(), log_weight, mask,
            out = out.detach(), den, causal, chunk, want_norm](BackwardContext& g) {
             const Tensor dout = g.out_grad().contiguous();
             const Tensor dlog_norm = want_norm && g.has_out_grad(1) ? g.out_grad(1).contiguous() : Tensor();
             Tensor dxq = Tensor::empty(xq.shape(), xq.dtype(), xq.device());
             Tensor dxk = Tensor::empty(xk.shape(), xk.dtype(), xk.device());
             Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
             Tensor domega = g.needs_grad(3) ? Tensor::empty(omega.shape(), omega.dtype(), omega.device()) : Tensor();
             if (xq.size(1) > 0) {
               kernels::random_feature_attention_backward().get(xq.device().type, xq.dtype())(
                   xq, xk, v, omega, log_weight, mask, out, den, dout, dlog_norm, dxq, dxk, dv, domega, causal, chunk);
             } else {
               dxq.fill_(0.0), dxk.fill_(0.0), dv.fill_(0.0);
               if (domega.defined()) domega.fill_(0.0);
             }
             if (g.needs_grad(0)) g.set_input_grad(0, dxq);
             if (g.needs_grad(1)) g.set_input_grad(1, dxk);
             if (g.needs_grad(2)) g.set_input_grad(2, dv);
             if (domega.defined()) g.set_input_grad(3, domega);
           });
  }
  return {out, log_norm};
}

}  // namespace

Tensor random_feature_attention(const Tensor& x_q, const Tensor& x_k, const Tensor& v, const Tensor& omega,
                                const Tensor& log_weight, bool causal, double eps, std::int64_t chunk,
                                const Tensor& key_mask) {
  return random_feature_attention_op(x_q, x_k, v, omega, log_weight, causal, eps, chunk, key_mask, false).out;
}

NormalizedAttention random_feature_attention_with_norm(const Tensor& x_q, const Tensor& x_k, const Tensor& v,
                                                       const Tensor& omega, const Tensor& log_weight, bool causal,
                                                       double eps, std::int64_t chunk, const Tensor& key_mask) {
  return random_feature_attention_op(x_q, x_k, v, omega, log_weight, causal, eps, chunk, key_mask, true);
}

}  // namespace dark
