// The differentiable ops: what models are written in. Each op checks shapes, dtypes and
// devices (errors name them), dispatches to a device kernel, and records itself on the tape
// when grad mode is on and an input requires grad. Ops are defined one file each in
// autograd/ops/, beside their backward.
#pragma once
#include <cstdint>
#include <vector>

#include "core/kernels.h"
#include "core/tensor.h"

namespace dark {

// ---- elementwise binary (numpy broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // gradient goes to a where a >= b
Tensor minimum(const Tensor& a, const Tensor& b);  // gradient goes to a where a <= b
Tensor pow(const Tensor& a, const Tensor& b);      // a > 0 wherever b's gradient is needed
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);

// ---- comparisons: 1 or 0 in the inputs' dtype, never differentiable ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

// ---- elementwise unary ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);       // exact: x * Phi(x)
Tensor gelu_tanh(const Tensor& x);  // tanh approximation
Tensor relu(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor add_scalar(const Tensor& x, double value);
Tensor mul_scalar(const Tensor& x, double value);
Tensor pow_scalar(const Tensor& x, double exponent);
Tensor unary(UnaryOp op, const Tensor& x, double alpha = 0.0);

// ---- reductions over axes (empty axes = all axes) ----
Tensor sum(const Tensor& x, std::vector<int> axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int> axes = {}, bool keepdim = false);
Tensor max(const Tensor& x, std::vector<int> axes = {}, bool keepdim = false);  // ties share the gradient
Tensor min(const Tensor& x, std::vector<int> axes = {}, bool keepdim = false);  // ties share the gradient
Tensor logsumexp(const Tensor& x, std::vector<int> axes = {}, bool keepdim = false);
Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int> axes, bool keepdim);
// The index (i64) of the first largest element along the last axis; never differentiable.
Tensor argmax(const Tensor& x);
// Sums x down to `shape` (the inverse of broadcasting): used by broadcasting backward.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- softmax ----
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);

// ---- linear algebra ----
// a: (..., m, k), b: (..., k, n) -> (..., m, n); batch axes broadcast; 1-D operands are
// not promoted (use reshape). trans_a / trans_b transpose the last two axes first.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x (rows, in) weight^T for weight (out, in) -> (rows, out), in x's dtype. The weight may be
// the f32 master weight of bf16 x: the op multiplies by a bf16 copy and gives the f32 weight
// its gradient as the product's f32 accumulation, written into the parameter's zeroed
// gradient buffer where it can be (see autograd/weights.h).
Tensor linear(const Tensor& x, const Tensor& weight);
// linear(x, weights[i]) for each weight, as one op (a gated MLP's gate and up projections):
// where the weights as the products use them lie side by side in one storage (a
// ParameterBuffer's values or the step's one cast of them), one batched GEMM forward, and
// backward one batched GEMM for their gradients (where their zeroed buffers and the outputs'
// gradients lie so too); x's gradient is summed in the products' accumulator. The outputs of
// a batched product are views of one (weights, rows, out) tensor.
std::vector<Tensor> linear_group(const Tensor& x, const std::vector<Tensor>& weights);
// The distance between consecutive matrices (2-D, contiguous, one shape, dtype and storage)
// that lie at equal, non-overlapping steps in order: their batch stride as one batched GEMM
// operand; 0 when they do not.
std::int64_t uniform_batch_stride(const std::vector<Tensor>& mats);
// x: (..., heads, k), w: (w_heads, n, k) with w_heads dividing heads -> (..., heads, n):
// out[..., h, :] = x[..., h, :] w[h / (heads / w_heads)]^T, without permuting either side.
Tensor per_head_matmul(const Tensor& x, const Tensor& w);

// ---- views and layout (differentiable) ----
Tensor reshape(const Tensor& x, Shape shape);
Tensor permute(const Tensor& x, const std::vector<int>& order);
Tensor transpose(const Tensor& x, int axis0, int axis1);
Tensor slice(const Tensor& x, int axis, std::int64_t start, std::int64_t end, std::int64_t step = 1);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor unsqueeze(const Tensor& x, int axis);
Tensor squeeze(const Tensor& x, int axis);
Tensor contiguous(const Tensor& x);
Tensor to_dtype(const Tensor& x, DType dtype);

// ---- indexing ----
// weight: (V, D), ids: any shape of i32/i64 -> ids.shape + (D). Backward scatter-adds.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// The same rows as `dtype`: for an f32 master weight of bf16 activations with the step's copy
// of the weights live (autograd/weights.h), gathered from its bf16 copy and given an f32
// gradient (bf16 output gradients summed in f32), where a recorded cast of the rows cost a
// kernel each way; without one, the rows cast (a recorded to_dtype); embedding(weight, ids)
// where the dtypes agree.
Tensor embedding(const Tensor& weight, const Tensor& ids, DType dtype);
// Selects entries of index (1-D, i32/i64) along axis.
Tensor index_select(const Tensor& x, int axis, const Tensor& index);
Tensor concat(const std::vector<Tensor>& parts, int axis);
// x (..., r) padded with zeros to (..., width) (dot products unchanged: the flash op needs
// queries, keys and values of one width); x itself when r == width.
Tensor pad_last_dim(const Tensor& x, std::int64_t width);
// Splits axis into pieces of the given sizes (which must add up to its length).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, int axis);
// cond != 0 ? a : b, broadcasting all three. cond is not differentiated.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` wherever mask != 0 (mask broadcasts to x).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
Tensor cumsum(const Tensor& x, int axis);

// ---- fused ops (one tape entry each, hand-written backward; Llama-style models) ----
// RMSNorm over the last axis: x: (..., D), weight: (D) -> x * rsqrt(mean(x^2) + eps) * weight.
// The weight is in x's dtype, or an f32 master weight of bf16 x (multiplied as its bf16 copy,
// autograd/weights.h, and given its f32 gradient unrounded).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
// The residual add and the RMSNorm after it in one pass each way: sum = x + residual (same
// shapes) and normed = rms_norm(sum, weight, eps), with the bits of add then rms_norm, and
// in backward the bits of the tape summing sum's two gradients. Saves a read of sum forward
// and a sum of two gradients backward (a decoder block's MLP input norm).
struct SumAndNorm {
  Tensor sum, normed;
};
SumAndNorm add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps);
// Rotary position embedding, Hugging Face Llama convention (rotate_half): x: (B, T, H, D),
// D even; pairs (i, i + D/2) rotate by angle (t + position_offset) * theta^(-2i/D):
// out[i] = x[i] cos - x[i + D/2] sin, out[i + D/2] = x[i + D/2] cos + x[i] sin.
// Angles, cos and sin are computed in double (then rounded to x's dtype) and cached per
// (T, D, theta, offset, dtype, device).
Tensor rope(const Tensor& x, double theta, std::int64_t position_offset = 0);
// rope of a layer's queries (B, T, Hq, D) and keys (B, T, Hkv, D) in one launch each way: the
// bits of rope(q) and rope(k). k may be undefined (then k stays so).
struct RopedPair {
  Tensor q, k;
};
RopedPair rope_pair(const Tensor& q, const Tensor& k, double theta, std::int64_t position_offset = 0);
// A counter-based random stream's key: `base`, plus the value of `offset` where it is defined
// (an i64 scalar on the data's device, read by the kernels: a CUDA graph's launch writes a new
// one, so that a captured step draws new masks).
struct RandomStream {
  std::uint64_t base = 0;
  Tensor offset;
};
// Inverted dropout: x * (u >= p ? 1 / (1 - p) : 0) with u = Tensor::rand(x's shape, seed, stream)
// in x's dtype: the values of the ops written out, in one pass each way, keeping 1 bit per
// element for backward. p in [0, 1); p 0 returns x.
Tensor dropout(const Tensor& x, double p, std::uint64_t seed, const RandomStream& stream);
// softmax(q k^T * scale + mask) v without the (T, S) matrix: tiled online softmax forward,
// FlashAttention-2 backward (recomputes probabilities per tile; deterministic).
// q: (B, T, Hq, D), k and v: (B, S, Hkv, D) with Hq % Hkv == 0 (grouped-query attention:
// query head h uses kv head h / (Hq / Hkv)) -> (B, T, Hq, D). Any strides (inputs without
// unit stride on D are copied first). causal: query t sees keys s <= t + (S - T), so the
// usual mask when T == S and the cached-prefix mask when T < S.
// key_mask: undefined (no padding) or (B, S) on q's device, any dtype, nonzero = real key,
// 0 = padding; never differentiated. A padded key drops out of the softmax (no weight in
// any numerator or denominator) and gets dk = dv = 0; queries at padded positions are still
// computed. k and v at padded positions may hold any finite values: no real output changes
// with them. A query that sees no real key (causal with T > S: rows t < T - S; or every key
// it may see padded, e.g. left padding) outputs 0 and gets zero gradient. An all-ones mask
// gives the same bits as no mask; causal outputs at t do not depend on the mask after t.
// window > 0 (sliding-window attention, e.g. Gemma's local layers; requires causal): query t
// also loses the keys s <= t + (S - T) - window, so it sees at most the window keys ending at
// its own position (Hugging Face's sliding-window mask). Work is O(T window), not O(T S);
// window >= S changes nothing (same bits as window = 0, which means no window).
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                       const Tensor& key_mask = Tensor(), std::int64_t window = 0);
// Mean over rows whose target != ignore_index of logsumexp(logits[n]) - logits[n, target[n]];
// 0 (and zero gradient) when every row is ignored. logits: (N, V) float, targets: (N) i32 / i64,
// gradient flows to logits only. The (N, V) softmax is never stored: backward rebuilds it
// from the saved per-row logsumexp.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100);
// cross_entropy(hidden weight^T, targets) without the (N, V) logits: the LM head and the loss
// fused over chunks of `chunk` rows of hidden (0 = linear_cross_entropy_chunk_rows's choice).
// hidden: (N, D), weight: (V, D) of hidden's dtype or the f32 master weight of bf16 hidden
// (autograd/weights.h: its gradient stays f32); the loss is in grad_dtype of hidden (f32 for
// f32 and bf16, whose logits are accumulated in f32). Gradients reach hidden and weight; when the
// op is recorded they are computed in the forward, chunk by chunk (no logits are kept or
// recomputed), and backward only scales them by the loss's gradient. A target that is not a
// class nor ignore_index is an error.
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            std::int64_t ignore_index = -100, std::int64_t chunk = 0);
// Rows of hidden per chunk of linear_cross_entropy: `requested` when > 0, else about 2^27
// logits (512 MiB in f32) at a time; at most `rows`.
std::int64_t linear_cross_entropy_chunk_rows(std::int64_t requested, std::int64_t rows, std::int64_t vocab);
// silu(gate) * up, gelu(gate) * up (exact gelu) and gelu_tanh(gate) * up (the tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), Hugging Face's
// gelu_pytorch_tanh), elementwise on same-shape tensors.
Tensor swiglu(const Tensor& gate, const Tensor& up);
Tensor geglu(const Tensor& gate, const Tensor& up);
Tensor geglu_tanh(const Tensor& gate, const Tensor& up);
// The gradients of those ops without the tape: dgate = dout * up * act'(gate) and dup =
// dout * act(gate) for contiguous same-shape tensors, and out = act(gate) * up, the forward's
// output with its bits, in the same pass; each computed only when wanted (undefined
// otherwise). For a layer that fuses the activation into a larger tape entry.
struct GluGrads {
  Tensor dgate, dup, out;
};
GluGrads glu_backward(GluOp op, const Tensor& gate, const Tensor& up, const Tensor& dout, bool want_gate,
                      bool want_up, bool want_out = false);
// Linear attention of the random-feature kinds (Performer / LFK / DARKFormer) on feature
// LOGITS, one tape entry. q_logits: (B, T, Hq, m), k_logits: (B, T, Hkv, m), v: (B, T, Hkv, Dv)
// with Hq % Hkv == 0 (query head h uses kv head h / (Hq / Hkv)) -> (B, T, Hq, Dv).
// key_mask: undefined (no padding) or (B, T) on q's device, any dtype, nonzero = real key,
// 0 = padding; never differentiated. With "real" meaning every key when there is no mask,
// per head:
//   qoff_t = max_f q_logits[t, f];  o_t = key offset at t: causal, max over real j <= t and
//   f of k_logits[j, f] (never a later position); bidirectional, max over all real j and f;
//   a_tj = exp(q_logits[t] - qoff_t) . exp(k_logits[j] - o_t)  for real j <= t (causal) /
//   all real j;  out_t = sum_j a_tj v_j / (sum_j a_tj + eps).
// A query that sees no real key (o_t = -inf, e.g. left padding) outputs 0 and gets zero
// gradient (its den is eps). Padded keys contribute nothing anywhere (k_logits and v there
// may hold any values, even inf or NaN) and get dk = dv = 0; queries at padded positions
// are still computed. An all-ones mask gives the same bits as no mask.
// eps is thus added in the offset-scaled units: in unscaled features it is
// eps * exp(qoff_t + o_t). Offsets carry no gradient (they cancel exactly except through
// eps), so gradients are those of the formula with the offsets held constant. Causal
// outputs at t are bit-identical whatever the positions after t hold (mask included).
// Chunks of `chunk` positions (intra-chunk masked product + a rescaled inter-chunk state);
// memory O(T (m + Dv)) per head, the backward recomputes states. CPU f32 / f64; any
// strides (copied to contiguous).
// window > 0 (requires causal; sliding-window layers): query t sees only the real keys j
// with t - window < j <= t, and o_t is the max over those keys alone (window >= T is the
// plain causal op). Work O(T (window / chunk) m Dv + T chunk (m + Dv)); no prefix state is
// subtracted (core/cpu/windowed_linear_attention.cpp; CUDA f32 / bf16:
// core/cuda/windowed_linear_attention.cu, with O(T m Dv / chunk) scratch per kv head).
Tensor linear_attention(const Tensor& q_logits, const Tensor& k_logits, const Tensor& v, bool causal, double eps,
                        std::int64_t chunk = 64, const Tensor& key_mask = Tensor(), std::int64_t window = 0);
// The random-feature attention of Performer / LFK / DARKFormer with its feature logits
// computed inside the kernel: linear_attention(l_q, l_k, v, causal, eps, chunk, key_mask) with
//   l[b, t, h, f] = omega[kv] [f] . x[b, t, h] - |x[b, t, h]|^2 / 2 - ln(m) / 2 (+ log_weight[kv, f]),
// kv = h / (H / Hkv) for queries and kv = h for keys. x_q: (B, T, Hq, r) and x_k: (B, T, Hkv, r)
// the transformed (scaled, and for DARKFormer projected by M) queries and keys, v: (B, T, Hkv,
// Dv), omega: (Hkv, m, r), log_weight: undefined or (Hkv, m) (never differentiated). Only
// x_q, x_k, v and omega are saved for the backward: the (B, T, H, m) logits and features of a
// pass are never kept (CUDA: never written to memory), so its memory is O(T (r + Dv)), not
// O(T m). Gradients reach x_q, x_k, v and omega (LFK trains omega).
Tensor random_feature_attention(const Tensor& x_q, const Tensor& x_k, const Tensor& v, const Tensor& omega,
                                const Tensor& log_weight, bool causal, double eps, std::int64_t chunk = 64,
                                const Tensor& key_mask = Tensor());

// ---- attention states that merge (the exact window, attention/exact_window.h) ----
// An attention output with each row's log normaliser: out (B, T, Hq, Dv) and log_norm
// (B, Hq, T) in grad_dtype of out (f32 for f32 and bf16, f64 for f64), the log of the row's
// unscaled denominator (sum of its keys' weights), -inf for a row that sees no real key.
// Both are differentiable outputs of one tape entry.
struct NormalizedAttention {
  Tensor out, log_norm;
};
// flash_attention and its logsumexp (scale q k^T's).
NormalizedAttention flash_attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                             double scale, const Tensor& key_mask = Tensor(),
                                             std::int64_t window = 0);
// linear_attention / random_feature_attention and log_norm_t = qoff_t + o_t + log(den_t + eps):
// eps belongs to this part's denominator (in its offset-scaled units, as in the op), so a
// merged row with no key here weighs exactly nothing. Offsets carry no gradient.
NormalizedAttention linear_attention_with_norm(const Tensor& q_logits, const Tensor& k_logits, const Tensor& v,
                                               bool causal, double eps, std::int64_t chunk = 64,
                                               const Tensor& key_mask = Tensor(), std::int64_t window = 0);
NormalizedAttention random_feature_attention_with_norm(const Tensor& x_q, const Tensor& x_k, const Tensor& v,
                                                       const Tensor& omega, const Tensor& log_weight, bool causal,
                                                       double eps, std::int64_t chunk = 64,
                                                       const Tensor& key_mask = Tensor());
// The attention over the union of two disjoint key sets from each set's state:
//   out = s a.out + (1 - s) b.out,  s = sigmoid(a.log_norm - b.log_norm)
// (exactly a.out where b saw no key, b.out where a saw none, 0 where neither did: both outs
// are 0 there). Differentiable in all four tensors (composed of elementwise ops).
Tensor merge_attention(const NormalizedAttention& a, const NormalizedAttention& b);
// The exact window (attention/exact_window.h) of a global layer, 1 <= window < T, as one tape
// entry: merge_attention(flash_attention_with_lse(x_q, x_k, v) over the window, scale 1 (x_q and
// x_k padded to Dv), random_feature_attention_with_norm on the sequence shifted by window), the
// merge done in place and not differentiated: the backward runs each kernel's own backward with
// the merged output and normaliser, so only out and two (B, Hq, T) rows are saved beyond the
// inputs. Gradients reach x_q, x_k, v and omega.
Tensor random_feature_attention_exact_window(const Tensor& x_q, const Tensor& x_k, const Tensor& v,
                                             const Tensor& omega, const Tensor& log_weight, std::int64_t window,
                                             double eps, std::int64_t chunk = 64, const Tensor& key_mask = Tensor());

// ---- operators for readable model code ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator*(const Tensor& a, double s) { return mul_scalar(a, s); }
inline Tensor operator+(const Tensor& a, double s) { return add_scalar(a, s); }

}  // namespace dark
