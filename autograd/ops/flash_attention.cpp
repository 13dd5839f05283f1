// Flash attention, fused: softmax(q k^T * scale + causal / sliding-window / key padding
// mask) v for grouped-query heads as one tape entry. The forward saves only the output and
// the per-row logsumexp (B, Hq, T); the backward kernel recomputes the probabilities tile by
// tile (FlashAttention-2), so no (T, S) matrix ever exists for the whole sequence.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

// The kernels read (B, L, H, D) tensors through their strides but need unit stride on D
// and a sequence stride of at least D (a row-major matrix of L rows per head); anything
// else (e.g. a transposed or expanded view) is copied first.
Tensor attention_layout(const Tensor& x) {
  const std::int64_t d = x.shape()[3];
  const bool ok = (x.stride(3) == 1 || d == 1) && x.stride(1) >= d && x.stride(0) >= 0 && x.stride(2) >= 0;
  return ok ? x : x.contiguous();
}

// The op, with the logsumexp as a second output when want_lse.
NormalizedAttention flash_attention_op(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                       double scale, const Tensor& key_mask, std::int64_t window, bool want_lse) {
  const char* name = "flash_attention";
  ops_detail::check_floating(name, q_in);
  ops_detail::check_same(name, q_in, k_in);
  ops_detail::check_same(name, q_in, v_in);
  DARK_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, name,
             ": q must be (B, T, Hq, D) and k, v (B, S, Hkv, D), got q ", q_in.describe(), ", k ", k_in.describe(),
             ", v ", v_in.describe());
  DARK_CHECK(k_in.shape() == v_in.shape(), name, ": k and v must have the same shape, got k ", k_in.describe(),
             ", v ", v_in.describe());
  const std::int64_t batch = q_in.shape()[0], hq = q_in.shape()[2], d = q_in.shape()[3];
  const std::int64_t hkv = k_in.shape()[2];
  DARK_CHECK(k_in.shape()[0] == batch && k_in.shape()[3] == d, name,
             ": k and v must share q's batch size and head dimension, got q ", q_in.describe(), ", k ",
             k_in.describe());
  DARK_CHECK(d > 0, name, ": head dimension must be positive, got q ", q_in.describe());
  DARK_CHECK(hkv > 0 && hq % hkv == 0, name, ": query heads (", hq, ") must be a multiple of key/value heads (",
             hkv, "), got q ", q_in.describe(), ", k ", k_in.describe());
  DARK_CHECK(!key_mask.defined() || (key_mask.dim() == 2 && key_mask.shape()[0] == batch &&
                                      key_mask.shape()[1] == k_in.shape()[1] && key_mask.device() == q_in.device()),
             name, ": key_mask must be (B, S) on q's device, got ", key_mask.describe(), " for q ", q_in.describe(),
             ", k ", k_in.describe());
  DARK_CHECK(window >= 0, name, ": window must be >= 0 (0 = no window), got ", window);
  DARK_CHECK(window == 0 || causal, name, ": a sliding window (window = ", window,
             ") needs causal attention; pass causal = true or window = 0");
  const Tensor q = attention_layout(q_in);
  const Tensor k = attention_layout(k_in);
  const Tensor v = attention_layout(v_in);
  const Tensor mask = ops_detail::kernel_key_mask(key_mask);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse = Tensor::empty({batch, hq, q.shape()[1]}, grad_dtype(q.dtype()), q.device());
  kernels::flash_attention_forward().get(q.device().type, q.dtype())(q, k, v, mask, out, lse, causal, scale,
                                                                     window);
  Tensor lse_out = want_lse ? lse : Tensor();
  if (should_record({&q_in, &k_in, &v_in})) {
    std::vector<Tensor*> outputs{&out};
    if (want_lse) outputs.push_back(&lse_out);
    record(name, {q_in, k_in, v_in}, outputs,
           [q = q.detach(), k = k.detach(), v = v.detach(), mask, out = out.detach(), lse = lse.detach(), causal,
            scale, window, want_lse](BackwardContext& g) {
             const Tensor dout = g.out_grad().contiguous();
             const Tensor dlse = want_lse && g.has_out_grad(1) ? g.out_grad(1).contiguous() : Tensor();
             Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
             Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());
             Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
             kernels::flash_attention_backward().get(q.device().type, q.dtype())(
                 q, k, v, mask, out, lse, dout, dlse, dq, dk, dv, causal, scale, window, /*accumulate=*/false);
             if (g.needs_grad(0)) g.set_input_grad(0, dq);
             if (g.needs_grad(1)) g.set_input_grad(1, dk);
             if (g.needs_grad(2)) g.set_input_grad(2, dv);
           });
  }
  return {out, lse_out};
}

}  // namespace

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                       const Tensor& key_mask, std::int64_t window) {
  return flash_attention_op(q, k, v, causal, scale, key_mask, window, false).out;
}

NormalizedAttention flash_attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                             double scale, const Tensor& key_mask, std::int64_t window) {
  return flash_attention_op(q, k, v, causal, scale, key_mask, window, true);
}

}  // namespace dark
