// The exact window (see exact_window.h).
#include "attention/exact_window.h"

#include <algorithm>
#include <limits>

#include "attention/kv_cache.h"
#include "attention/recurrent_state.h"
#include "autograd/grad_mode.h"

namespace dark::attention {

namespace {

void check_spec(const ExactWindowSpec& spec) {
  DARK_CHECK(spec.window >= 1 && spec.layer_window >= 0 && spec.eps >= 0 && spec.chunk >= 1,
             "exact window: needs window >= 1, a layer window >= 0, eps >= 0 and chunk >= 1, got window ", spec.window,
             ", layer window ", spec.layer_window, ", eps ", spec.eps, ", chunk ", spec.chunk);
}

// A state that saw no key (its rows weigh nothing in a merge): out 0, log_norm -inf.
NormalizedAttention empty_state(std::int64_t batch, std::int64_t len, std::int64_t heads, std::int64_t dv,
                                DType dtype, Device device) {
  return {Tensor::zeros({batch, len, heads, dv}, dtype, device),
          Tensor::full({batch, heads, len}, -std::numeric_limits<double>::infinity(), grad_dtype(dtype), device)};
}

// The far part of a length-T sequence: keys j <= t - W for query t (and j > t - w on a
// sliding-window layer) = causal attention of the shifted sequence (queries W.., keys and
// values ..T - W), then W rows that see no key in front.
NormalizedAttention far_part(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                             const Tensor& log_weight, const Tensor& key_mask, const ExactWindowSpec& spec,
                             const FeatureLogitsFn& logits) {
  const std::int64_t B = xq.size(0), T = xq.size(1), H = xq.size(2), W = spec.window, n = T - W;
  const Tensor q = slice(xq, 1, W, T), k = slice(xk, 1, 0, n), vs = slice(v, 1, 0, n);
  const Tensor mask = key_mask.defined() ? slice(key_mask, 1, 0, n) : Tensor();
  const std::int64_t fw = spec.far_window();
  // A sliding-window layer whose far window spans the shifted sequence runs the plain op.
  const NormalizedAttention shifted =
      fw > 0 && fw < n
          ? linear_attention_with_norm(logits(q), logits(k), vs, /*causal=*/true, spec.eps, spec.chunk, mask, fw)
          : random_feature_attention_with_norm(q, k, vs, omega, log_weight, /*causal=*/true, spec.eps, spec.chunk,
                                               mask);
  const NormalizedAttention front = empty_state(B, W, H, v.size(3), v.dtype(), v.device());
  return {concat({front.out, shifted.out}, 1), concat({front.log_norm, shifted.log_norm}, 2)};
}

// Drops all but the last `count` positions of the state's caches (copies, so the dropped
// prefix's memory is freed).
void keep_last(ExactWindowState& s, std::int64_t count) {
  const std::int64_t held = s.keys.size(1);
  for (Tensor* cache : {&s.keys, &s.key_logits, &s.values}) *cache = slice(*cache, 1, held - count, held).contiguous();
}

// The far part's state with its log normaliser shifted by far_bias (Hq) where one is given.
NormalizedAttention biased(NormalizedAttention far, const Tensor& far_bias) {
  if (!far_bias.defined()) return far;
  far.log_norm = add(far.log_norm, reshape(to_dtype(far_bias, far.log_norm.dtype()), {1, far_bias.size(0), 1}));
  return far;
}

// A prompt into an empty state on a global layer, in the forward's ops over all of it (the
// near part: flash over each query's W nearest keys; the far part: the chunked op on the
// shifted sequence), then the state the per-position loop would have reached: the last W
// positions cached, the ones before folded into the recurrent state with one product. (A
// loop over the positions cost a 4096-token prompt 28 s on SmolLM2, issue 63.)
Tensor prefill_global(const Tensor& xq, const Tensor& xk, const Tensor& lq, const Tensor& lk, const Tensor& v,
                      const ExactWindowSpec& spec, ExactWindowState& s, const Tensor& far_bias) {
  const std::int64_t B = xq.size(0), T = xq.size(1), hq = xq.size(2), dv = v.size(3), W = spec.window, n = T - W;
  const NormalizedAttention near = flash_attention_with_lse(pad_last_dim(xq, dv), pad_last_dim(xk, dv), v,
                                                            /*causal=*/true, 1.0, Tensor(), spec.near());
  NormalizedAttention far = empty_state(B, T, hq, dv, v.dtype(), v.device());
  if (n > 0) {
    const NormalizedAttention shifted = linear_attention_with_norm(
        slice(lq, 1, W, T), slice(lk, 1, 0, n), slice(v, 1, 0, n), /*causal=*/true, spec.eps, spec.chunk);
    const NormalizedAttention front = empty_state(B, W, hq, dv, v.dtype(), v.device());
    far = {concat({front.out, shifted.out}, 1), concat({front.log_norm, shifted.log_norm}, 2)};
    fold_positions(s.far, slice(lk, 1, 0, n), slice(v, 1, 0, n));
  }
  const std::int64_t first = std::max<std::int64_t>(n, 0);
  s.keys = slice(xk, 1, first, T).contiguous();
  s.key_logits = slice(lk, 1, first, T).contiguous();
  s.values = slice(v, 1, first, T).contiguous();
  return merge_attention(near, biased(far, far_bias));
}

}  // namespace

Tensor exact_window_attention(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                              const Tensor& log_weight, const Tensor& key_mask, const ExactWindowSpec& spec,
                              const FeatureLogitsFn& logits, const Tensor& far_bias) {
  check_spec(spec);
  DARK_CHECK(xq.dim() == 4 && xk.dim() == 4 && v.dim() == 4 && xq.size(1) == xk.size(1) &&
                 xq.size(3) == xk.size(3) && xq.size(3) <= v.size(3),
             "exact window: expected x_q (B, T, Hq, r), x_k (B, T, Hkv, r) and v (B, T, Hkv, Dv) with r <= Dv, got ",
             xq.describe(), ", ", xk.describe(), ", ", v.describe());
  const std::int64_t dv = v.size(3);
  const Tensor qp = pad_last_dim(xq, dv), kp = pad_last_dim(xk, dv);
  // No query has a far key: the kind's exact attention over the window, the same op and bits
  // as its exact mode.
  if (!spec.has_far(xq.size(1))) return flash_attention(qp, kp, v, /*causal=*/true, 1.0, key_mask, spec.near());
  // Global layers: one tape entry that saves only the merged output (autograd/ops.h); a far
  // bias needs the merge composed of differentiable ops.
  if (spec.layer_window == 0 && !far_bias.defined())
    return random_feature_attention_exact_window(xq, xk, v, omega, log_weight, spec.window, spec.eps, spec.chunk,
                                                 key_mask);
  const NormalizedAttention near = flash_attention_with_lse(qp, kp, v, /*causal=*/true, 1.0, key_mask, spec.near());
  return merge_attention(near, biased(far_part(xq, xk, v, omega, log_weight, key_mask, spec, logits), far_bias));
}

Tensor window_only_attention(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& key_mask,
                             const ExactWindowSpec& spec) {
  check_spec(spec);
  DARK_CHECK(xq.dim() == 4 && xk.dim() == 4 && v.dim() == 4 && xq.size(1) == xk.size(1) &&
                 xq.size(3) == xk.size(3) && xq.size(3) <= v.size(3),
             "window only: expected x_q (B, T, Hq, r), x_k (B, T, Hkv, r) and v (B, T, Hkv, Dv) with r <= Dv, got ",
             xq.describe(), ", ", xk.describe(), ", ", v.describe());
  const std::int64_t dv = v.size(3);
  return flash_attention(pad_last_dim(xq, dv), pad_last_dim(xk, dv), v, /*causal=*/true, 1.0, key_mask, spec.near());
}

Tensor window_only_decode(const Tensor& xq, const Tensor& xk, const Tensor& v, const ExactWindowSpec& spec,
                          std::unique_ptr<nn::DecodeState>& state) {
  NoGradGuard no_grad;
  check_spec(spec);
  const std::int64_t dv = v.size(3);
  return attend_with_cache(pad_last_dim(xq, dv), pad_last_dim(xk, dv), v, 1.0, state, spec.near());
}

Tensor exact_window_decode(const Tensor& xq_in, const Tensor& xk_in, const Tensor& lq_in, const Tensor& lk_in,
                           const Tensor& v_in, const ExactWindowSpec& spec, std::unique_ptr<nn::DecodeState>& state,
                           const Tensor& far_bias) {
  NoGradGuard no_grad;
  check_spec(spec);
  if (!state) state = std::make_unique<ExactWindowState>();
  auto* s = dynamic_cast<ExactWindowState*>(state.get());
  DARK_CHECK(s != nullptr, "attention decode: the state was made by another attention kind");
  // bf16 decodes in f32 (as the recurrent state does).
  const DType acc = v_in.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor xq = xq_in.to(acc), xk = xk_in.to(acc), lq = lq_in.to(acc), lk = lk_in.to(acc), v = v_in.to(acc);
  const std::int64_t B = xq.size(0), T = xq.size(1), hq = xq.size(2), dv = v.size(3);
  const std::int64_t near = spec.near(), keep = std::max(spec.window, spec.layer_window);
  if (!s->keys.defined() && spec.layer_window == 0 && T > 1)
    return prefill_global(xq, xk, lq, lk, v, spec, *s, far_bias).to(v_in.dtype());
  std::vector<Tensor> outputs;
  for (std::int64_t t = 0; t < T; ++t) {
    auto at = [t](const Tensor& x) { return slice(x, 1, t, t + 1); };
    auto append = [](const Tensor& cache, const Tensor& row) { return cache.defined() ? concat({cache, row}, 1) : row; };
    s->keys = append(s->keys, at(xk));
    s->key_logits = append(s->key_logits, at(lk));
    s->values = append(s->values, at(v));
    std::int64_t held = s->keys.size(1);
    // Global layers: the key W positions back leaves the window for the running feature state.
    if (spec.layer_window == 0 && held > spec.window) {
      fold_positions(s->far, slice(s->key_logits, 1, 0, 1), slice(s->values, 1, 0, 1));
      keep_last(*s, --held);
    }
    const Tensor q = at(xq), ql = at(lq);
    const std::int64_t nn = std::min(near, held);
    const NormalizedAttention exact =
        flash_attention_with_lse(pad_last_dim(q, dv), pad_last_dim(slice(s->keys, 1, held - nn, held), dv),
                                 slice(s->values, 1, held - nn, held), /*causal=*/true, 1.0);
    NormalizedAttention far = empty_state(B, 1, hq, dv, acc, v.device());
    if (spec.layer_window == 0) {
      if (s->far) far = read_state(*s->far, ql, spec.eps);
    } else if (spec.far_window() > 0 && held > near) {
      // Sliding-window layer: the query's far keys (t - w, t - W] are the cached ones before
      // its window; it sits on the last of their rows (its causal prefix: all of them).
      const std::int64_t nf = held - near;
      const Tensor queries =
          nf == 1 ? ql : concat({Tensor::zeros({B, nf - 1, hq, ql.size(3)}, acc, v.device()), ql}, 1);
      const NormalizedAttention rows = linear_attention_with_norm(
          queries, slice(s->key_logits, 1, 0, nf), slice(s->values, 1, 0, nf), /*causal=*/true, spec.eps, spec.chunk,
          Tensor(), spec.far_window());
      far = {slice(rows.out, 1, nf - 1, nf), slice(rows.log_norm, 2, nf - 1, nf)};
    }
    outputs.push_back(merge_attention(exact, biased(far, far_bias)));
    if (held > keep) keep_last(*s, keep);  // what no later query can see
  }
  return (T == 1 ? outputs[0] : concat(outputs, 1)).to(v_in.dtype());
}

}  // namespace dark::attention
