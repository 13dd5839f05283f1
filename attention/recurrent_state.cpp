// Recurrent random-feature decoding (see recurrent_state.h).
#include "attention/recurrent_state.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::attention {

namespace {
RecurrentState& recurrent(nn::DecodeState* state) {
  auto* s = dynamic_cast<RecurrentState*>(state);
  DARK_CHECK(s != nullptr, "attention decode: the state was made by another attention kind");
  return *s;
}
}  // namespace

void fold_positions(std::unique_ptr<nn::DecodeState>& state, const Tensor& k_logits, const Tensor& v) {
  NoGradGuard no_grad;
  if (!state) state = std::make_unique<RecurrentState>();
  RecurrentState& s = recurrent(state.get());
  const std::int64_t B = k_logits.size(0), n = k_logits.size(1), hkv = k_logits.size(2);
  const Tensor kt = transpose(k_logits, 1, 2).contiguous();  // (B, Hkv, n, m)
  const Tensor vx = concat({transpose(v, 1, 2).contiguous(), Tensor::ones({B, hkv, n, 1}, v.dtype(), v.device())}, 3);
  const Tensor kmax = max(kt, {2, 3}, true);  // (B, Hkv, 1, 1): the running offset of one fold per position
  if (!s.state.defined()) {
    s.offset = kmax;
    s.state = matmul(exp(sub(kt, kmax)), vx, /*trans_a=*/true);
  } else {
    const Tensor offset = maximum(s.offset, kmax);
    s.state = add(mul(s.state, exp(sub(s.offset, offset))), matmul(exp(sub(kt, offset)), vx, true));
    s.offset = offset;
  }
}

NormalizedAttention read_state(const nn::DecodeState& state, const Tensor& q_logits, double eps) {
  NoGradGuard no_grad;
  const auto* held = dynamic_cast<const RecurrentState*>(&state);
  DARK_CHECK(held != nullptr, "attention decode: the state was made by another attention kind");
  const RecurrentState& s = *held;
  const std::int64_t B = q_logits.size(0), hq = q_logits.size(2), m = q_logits.size(3);
  const std::int64_t hkv = s.state.size(1), group = hq / hkv, dv = s.state.size(3) - 1;
  const Tensor qt = reshape(q_logits, {B, hkv, group, m});
  const Tensor qoff = max(qt, {3}, true);
  const Tensor y = matmul(exp(sub(qt, qoff)), s.state);  // (B, Hkv, group, Dv + 1)
  const Tensor den = add_scalar(slice(y, 3, dv, dv + 1), eps);
  const Tensor out = reshape(div(slice(y, 3, 0, dv), den), {B, 1, hq, dv});
  const Tensor log_norm = reshape(add(add(qoff, s.offset), log(den)), {B, hq, 1});
  return {out, log_norm.to(grad_dtype(out.dtype()))};
}

Tensor linear_attention_decode(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, double eps,
                               std::int64_t chunk, std::unique_ptr<nn::DecodeState>& state_ptr) {
  NoGradGuard no_grad;
  DARK_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4 && q_in.size(1) == k_in.size(1) &&
                 k_in.size(1) == v_in.size(1) && q_in.size(2) % k_in.size(2) == 0,
             "linear_attention_decode: expected q (B, T, Hq, m), k (B, T, Hkv, m), v (B, T, Hkv, Dv), got ",
             q_in.describe(), ", ", k_in.describe(), ", ", v_in.describe());
  if (state_ptr) recurrent(state_ptr.get());  // made by this kind
  const DType acc = v_in.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor q = q_in.to(acc), k = k_in.to(acc), v = v_in.to(acc);
  if (!state_ptr && q.size(1) > 1) {  // a prompt: the training path's chunked op, then its state at once
    const Tensor out = linear_attention(q, k, v, /*causal=*/true, eps, chunk);
    fold_positions(state_ptr, k, v);
    return out.to(v_in.dtype());
  }
  std::vector<Tensor> outputs;
  for (std::int64_t t = 0; t < q.size(1); ++t) {
    fold_positions(state_ptr, slice(k, 1, t, t + 1), slice(v, 1, t, t + 1));
    outputs.push_back(read_state(*state_ptr, slice(q, 1, t, t + 1), eps).out);
  }
  return (outputs.size() == 1 ? outputs[0] : concat(outputs, 1)).to(v_in.dtype());
}

Tensor windowed_linear_attention_decode(const Tensor& q, const Tensor& k, const Tensor& v, double eps,
                                        std::int64_t window, std::int64_t chunk,
                                        std::unique_ptr<nn::DecodeState>& state_ptr) {
  NoGradGuard no_grad;
  DARK_CHECK(window >= 1, "attention decode: window must be >= 1, got ", window);
  if (!state_ptr) state_ptr = std::make_unique<WindowedFeatureCache>();
  auto* cache = dynamic_cast<WindowedFeatureCache*>(state_ptr.get());
  DARK_CHECK(cache != nullptr, "attention decode: the state was made by another attention kind");
  const Tensor keys = cache->keys.defined() ? concat({cache->keys, k}, 1) : k;
  const Tensor values = cache->values.defined() ? concat({cache->values, v}, 1) : v;
  const std::int64_t cached = keys.size(1) - q.size(1), total = keys.size(1);
  // Cached positions need no output: their query rows are zeros (any finite row would do).
  const Tensor queries =
      cached == 0 ? q : concat({Tensor::zeros({q.size(0), cached, q.size(2), q.size(3)}, q.dtype(), q.device()), q}, 1);
  const Tensor out = slice(linear_attention(queries, keys, values, /*causal=*/true, eps, chunk, Tensor(), window), 1,
                           cached, total);
  // The next query sees the window - 1 keys before it: keeping `window` is enough.
  const std::int64_t keep = std::min(total, window);
  cache->keys = slice(keys, 1, total - keep, total).contiguous();
  cache->values = slice(values, 1, total - keep, total).contiguous();
  return out;
}

}  // namespace dark::attention
