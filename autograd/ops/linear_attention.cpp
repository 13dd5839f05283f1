// Linear attention on feature logits, fused: the shared kernel of the random-feature
// attention kinds (Performer / LFK / DARKFormer) as one tape entry. Features are
// exp(logit - offset) with per-token query offsets and causal-safe running key offsets; the
// normaliser comes from the same pass as the numerator (v with a ones column). The forward
// saves the output and the guarded denominator (B, Hq, T); the backward kernel recomputes
// the chunk states (see core/cpu/linear_attention.cpp). Semantics: autograd/ops.h.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

// The op, with the log normaliser as a second output when want_norm.
NormalizedAttention linear_attention_op(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                        double eps, std::int64_t chunk, const Tensor& key_mask, std::int64_t window,
                                        bool want_norm) {
  const char* name = "linear_attention";
  ops_detail::check_floating(name, q_in);
  ops_detail::check_same(name, q_in, k_in);
  ops_detail::check_same(name, q_in, v_in);
  DARK_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, name,
             ": q_logits must be (B, T, Hq, m), k_logits (B, T, Hkv, m) and v (B, T, Hkv, Dv), got q ",
             q_in.describe(), ", k ", k_in.describe(), ", v ", v_in.describe());
  const std::int64_t batch = q_in.shape()[0], len = q_in.shape()[1], hq = q_in.shape()[2], m = q_in.shape()[3];
  const std::int64_t hkv = k_in.shape()[2], dv = v_in.shape()[3];
  DARK_CHECK(k_in.shape()[0] == batch && k_in.shape()[1] == len && k_in.shape()[3] == m, name,
             ": k_logits must share q_logits' batch, length and feature count, got q ", q_in.describe(), ", k ",
             k_in.describe());
  DARK_CHECK(v_in.shape()[0] == batch && v_in.shape()[1] == len && v_in.shape()[2] == hkv, name,
             ": v must share k_logits' batch, length and heads, got k ", k_in.describe(), ", v ", v_in.describe());
  DARK_CHECK(m > 0 && dv > 0, name, ": feature count and value dimension must be positive, got q ", q_in.describe(),
             ", v ", v_in.describe());
  DARK_CHECK(hkv > 0 && hq % hkv == 0, name, ": query heads (", hq, ") must be a multiple of key/value heads (",
             hkv, "), got q ", q_in.describe(), ", k ", k_in.describe());
  DARK_CHECK(chunk >= 1, name, ": chunk must be >= 1, got ", chunk);
  DARK_CHECK(eps >= 0, name, ": eps must be >= 0, got ", eps);
  DARK_CHECK(!key_mask.defined() || (key_mask.dim() == 2 && key_mask.shape()[0] == batch &&
                                      key_mask.shape()[1] == len && key_mask.device() == q_in.device()),
             name, ": key_mask must be (B, T) on q_logits' device, got ", key_mask.describe(), " for q ",
             q_in.describe());
  DARK_CHECK(window >= 0 && (window == 0 || causal), name, ": window must be >= 0 (0 = none) and needs causal, got ",
             window, causal ? " (causal)" : " (bidirectional)");
  // A window that covers the whole sequence changes nothing: the causal kernel runs.
  const bool windowed = window > 0 && window < len;
  DARK_CHECK(!windowed || kernels::windowed_linear_attention_forward().has(q_in.device().type, q_in.dtype()), name,
             ": a sliding window of ", window, " over ", len, " positions has no ",
             device_type_name(q_in.device().type), " kernel for ", dtype_name(q_in.dtype()),
             " (CPU: f32, f64; CUDA: f32, bf16)");
  const Tensor q = q_in.contiguous();
  const Tensor k = k_in.contiguous();
  const Tensor v = v_in.contiguous();
  const Tensor mask = ops_detail::kernel_key_mask(key_mask);
  Tensor out = Tensor::empty({batch, len, hq, dv}, q.dtype(), q.device());
  Tensor den = Tensor::empty({batch, hq, len}, q.dtype(), q.device());
  Tensor log_norm = want_norm ? Tensor::empty({batch, hq, len}, grad_dtype(q.dtype()), q.device()) : Tensor();
  if (windowed)
    kernels::windowed_linear_attention_forward().get(q.device().type, q.dtype())(q, k, v, mask, out, den, log_norm,
                                                                                 window, eps, chunk);
  else if (len > 0)
    kernels::linear_attention_forward().get(q.device().type, q.dtype())(q, k, v, mask, out, den, log_norm, causal,
                                                                        eps, chunk);
  if (should_record({&q_in, &k_in, &v_in})) {
    std::vector<Tensor*> outputs{&out};
    if (want_norm) outputs.push_back(&log_norm);
    record(name, {q_in, k_in, v_in}, outputs,
           [q = q.detach(), k = k.detach(), v = v.detach(), mask, out = out.detach(), den, causal,
            chunk, windowed, window, want_norm](BackwardContext& g) {
             const Tensor dout = g.out_grad().contiguous();
             const Tensor dlog_norm = want_norm && g.has_out_grad(1) ? g.out_grad(1).contiguous() : Tensor();
             Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
             Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());
             Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
             if (windowed)
               kernels::windowed_linear_attention_backward().get(q.device().type, q.dtype())(
                   q, k, v, mask, out, den, dout, dlog_norm, dq, dk, dv, window, chunk);
             else if (q.shape()[1] > 0)
               kernels::linear_attention_backward().get(q.device().type, q.dtype())(
                   q, k, v, mask, out, den, dout, dlog_norm, dq, dk, dv, causal, chunk);
             if (g.needs_grad(0)) g.set_input_grad(0, dq);
             if (g.needs_grad(1)) g.set_input_grad(1, dk);
             if (g.needs_grad(2)) g.set_input_grad(2, dv);
           });
  }
  return {out, log_norm};
}

}  // namespace

Tensor linear_attention(const Tensor& q_logits, const Tensor& k_logits, const Tensor& v, bool causal, double eps,
                        std::int64_t chunk, const Tensor& key_mask, std::int64_t window) {
  return linear_attention_op(q_logits, k_logits, v, causal, eps, chunk, key_mask, window, false).out;
}

NormalizedAttention linear_attention_with_norm(const Tensor& q_logits, const Tensor& k_logits, const Tensor& v,
                                               bool causal, double eps, std::int64_t chunk, const Tensor& key_mask,
                                               std::int64_t window) {
  return linear_attention_op(q_logits, k_logits, v, causal, eps, chunk, key_mask, window, true);
}

}  // namespace dark
