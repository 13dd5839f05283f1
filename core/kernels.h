// The kernel interface between ops (autograd/ops/) and devices (core/cpu/, core/cuda/).
// Each kernel has the same signature on every device; shapes are written as letters.
// Conventions, checked by the ops before dispatch so kernels stay simple:
//   - every tensor passed to a kernel is on one device and has the dispatched dtype,
//     unless a comment says otherwise;
//   - "out" tensors are allocated contiguous by the caller;
//   - "strided" inputs may have any strides (including 0 for broadcast axes) but already
//     have the output's shape.
#pragma once
#include <cstdint>
#include <string>

#include "core/dispatch.h"
#include "core/tensor.h"

namespace dark {

enum class BinaryOp : std::uint8_t {
  add, sub, mul, div, maximum, minimum, pow,
  // comparisons write 1 or 0 in the output dtype
  eq, ne, lt, le, gt, ge,
};

enum class UnaryOp : std::uint8_t {
  neg, exp, log, sqrt, rsqrt, tanh, sigmoid, silu, gelu, gelu_tanh, relu, abs, square, sin,
  cos, reciprocal,
  // with the scalar argument `alpha`:
  add_scalar, mul_scalar, pow_scalar,
};

enum class ReduceOp : std::uint8_t { sum, mean, max, min, logsumexp };

const char* binary_op_name(BinaryOp op);
const char* unary_op_name(UnaryOp op);
const char* reduce_op_name(ReduceOp op);

// One (batched) matrix product out[b] = alpha * op(a[b]) op(b[b]) + beta * out[b], with
// op = transpose when the flag is set. Matrices are row-major with unit column stride;
// lda/ldb/ldc are row strides; batch strides may be 0 (broadcast operand).
struct GemmShape {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
};

DARK_DECLARE_KERNEL(fill, void(Tensor& out, double value))
// dst[i] = src[i] for same-shape, same-dtype tensors with arbitrary strides.
DARK_DECLARE_KERNEL(strided_copy, void(const Tensor& src, Tensor& dst))
// Contiguous dtype conversion; dispatched on src dtype, dst may have any dtype.
DARK_DECLARE_KERNEL(cast, void(const Tensor& src, Tensor& dst))

// out = a (op) b, a and b strided with out's shape.
DARK_DECLARE_KERNEL(binary, void(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out))
// out = cond != 0 ? a : b; all strided with out's shape and out's dtype.
DARK_DECLARE_KERNEL(where, void(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out))
// y = f(x), contiguous. alpha is the scalar of the *_scalar ops.
DARK_DECLARE_KERNEL(unary_forward, void(UnaryOp op, const Tensor& x, Tensor& y, double alpha))
// dx = dy * f'(x); y = f(x) is passed because some derivatives read it. All contiguous.
DARK_DECLARE_KERNEL(unary_backward, void(UnaryOp op, const Tensor& x, const Tensor& y,
                                         const Tensor& dy, Tensor& dx, double alpha))

// x: (outer, n, inner) contiguous -> out: (outer, inner). Reduces the middle axis.
DARK_DECLARE_KERNEL(reduce, void(ReduceOp op, const Tensor& x, Tensor& out, std::int64_t outer,
                                 std::int64_t n, std::int64_t inner))

// Over the last axis of x: (rows, n) contiguous. log=true gives log_softmax.
DARK_DECLARE_KERNEL(softmax_forward, void(const Tensor& x, Tensor& y, bool log))
// dx from the forward output y and upstream dy, all (rows, n) contiguous.
DARK_DECLARE_KERNEL(softmax_backward, void(const Tensor& y, const Tensor& dy, Tensor& dx, bool log))

// Over the last axis of x: (rows, n) contiguous -> out: (rows) i64, the index of the first
// largest element of each row (std::max_element's rule: a NaN is never larger, so it is
// chosen only when it comes first and nothing after compares larger).
DARK_DECLARE_KERNEL(argmax, void(const Tensor& x, Tensor& out))

// See GemmShape. a, b, out are the base tensors whose data() the strides index. Dispatched on
// a's dtype; out has it too, except that bf16 operands may write an f32 out (CUDA), which
// then holds the f32 accumulation unrounded.
DARK_DECLARE_KERNEL(matmul, void(const Tensor& a, const Tensor& b, Tensor& out, const GemmShape& s))

// x: (outer, n, inner), index: (k) of i32/i64 in [0, n) -> out: (outer, k, inner).
// Dispatched on x's dtype; the index dtype is read from the tensor.
DARK_DECLARE_KERNEL(gather, void(const Tensor& x, const Tensor& index, Tensor& out,
                                 std::int64_t outer, std::int64_t n, std::int64_t inner))
// dx (outer, n, inner) += scatter of dout (outer, k, inner) at index: the backward of gather.
// Deterministic: repeated indices are summed in index order. dx is in dout's dtype or, on
// CUDA, grad_dtype(dout) (bf16 gradients of an f32 master weight, summed in f32).
// On every device, an index outside [0, n) in gather or scatter_add throws the error
// index_out_of_range builds, naming the first bad position; scatter_add leaves dx unchanged.
DARK_DECLARE_KERNEL(scatter_add, void(const Tensor& dout, const Tensor& index, Tensor& dx,
                                      std::int64_t outer, std::int64_t n, std::int64_t inner))
// "gather: index 7 at position 2 is out of range [0, 5)": one message for every device.
std::string index_out_of_range(const char* kernel, std::int64_t index, std::int64_t position, std::int64_t n);
// Inclusive prefix sums along the middle axis of x: (outer, n, inner); reverse=true sums
// from the end (the backward of cumsum).
DARK_DECLARE_KERNEL(cumsum, void(const Tensor& x, Tensor& out, std::int64_t outer,
                                 std::int64_t n, std::int64_t inner, bool reverse))

// Philox normal / uniform fills of a contiguous tensor: element i uses counter
// (offset + i / 4, stream) under key seed, lane i % 4 (see core/philox.h).
DARK_DECLARE_KERNEL(fill_normal, void(Tensor& out, std::uint64_t seed, std::uint64_t stream,
                                      std::uint64_t offset, double mean, double std))
DARK_DECLARE_KERNEL(fill_uniform, void(Tensor& out, std::uint64_t seed, std::uint64_t stream,
                                       std::uint64_t offset, double low, double high))
// Inverted dropout, forward: out = x * (u >= p ? scale : 0) for contiguous x and out of one
// shape and dtype, where u is element i of fill_uniform(seed, stream + *stream_offset, offset 0,
// [0, 1)) rounded to x's dtype, p rounded to it, and scale = 1 / (1 - p) rounded to its
// compute type, then to the dtype: the bits of mul(x, mul_scalar(ge(u, p), scale)). mask: i32
// (ceil(N / 32)) gets the kept units, element i as bit i % 32 of word i / 32 (what backward
// reads: 1 bit per element where the ops kept a whole tensor). stream_offset is an undefined
// tensor or an i64 scalar on x's device that the kernel reads, so that a CUDA graph can take
// a new stream at each launch (train/step_graph.h).
DARK_DECLARE_KERNEL(dropout_forward, void(const Tensor& x, Tensor& out, Tensor& mask, double p, std::uint64_t seed,
                                          std::uint64_t stream, const Tensor& stream_offset))
// Its backward: dx = dy * (kept ? scale : 0), the bits of mul(dy, mul_scalar(ge(u, p), scale)).
DARK_DECLARE_KERNEL(dropout_backward, void(const Tensor& dy, const Tensor& mask, Tensor& dx, double p))

// A gradient sum of mixed precision (autograd/tape.cpp): out = float(a) + float(b), plus
// float(c) when c is defined, summed in f32 in that order and rounded to out's dtype (f32, or
// bf16 for the last term of a bf16 tensor's gradient); a, b and c each f32 or bf16, all
// contiguous and of one shape (out may be a). One pass where casting the bf16 operands first
// and the sums after took up to four per term, with the same bits (the casts to f32 are exact,
// and a three-term sum rounds where two two-term sums into f32 would). Dispatched on out's
// dtype.
DARK_DECLARE_KERNEL(grad_sum, void(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out))

// ---- fused ops (autograd/ops/{rms_norm,rope,flash_attention,cross_entropy,glu}.cpp) ----
// Per-row statistics (rstd, lse) are held in grad_dtype(x): f32 for f32 and bf16, f64 for f64.

// RMSNorm over the last axis: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
// x, y: (R, D), weight: (D), rstd: (R); all contiguous. With residual defined ((R, D), the
// residual add fused in), the norm is of s = x + residual, rounded to the dtype as the add
// op rounds it and written to sum (R, D); undefined residual and sum: the plain norm.
DARK_DECLARE_KERNEL(rms_norm_forward, void(const Tensor& x, const Tensor& weight, Tensor& y, Tensor& rstd,
                                           double eps, const Tensor& residual, Tensor& sum))
// dx: (R, D) and dweight: (D) are written (not accumulated); either may be undefined, and
// is then not computed. dweight is in x's dtype or grad_dtype(x) (an f32 master weight of
// bf16 x: the sum unrounded). dweight is summed over rows in a fixed order (deterministic). dsum:
// undefined, or the gradient reaching x from elsewhere (the fused residual add's output),
// added to dx: dx = dtype(dtype(dx of the norm) + dsum), the bits of the tape's sum of the two.
DARK_DECLARE_KERNEL(rms_norm_backward, void(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                            const Tensor& dy, Tensor& dx, Tensor& dweight, const Tensor& dsum))

// Rotary embedding, rotate-half convention: for each (b, t, h) row of x: (B, T, H, D),
// pairs (i, i + D/2) rotate by the angle whose cos / sin are cos[t, i], sin[t, i]
// (tables (T, D/2) in grad_dtype(x)), into y. inverse = true rotates by the negative angle
// (the backward). x2 -> y2: undefined, or a second tensor (B, T, H2, D) rotated by the same
// tables in the same pass (a layer's queries and keys: one launch for both). All contiguous.
DARK_DECLARE_KERNEL(rope, void(const Tensor& x, const Tensor& x2, const Tensor& cos, const Tensor& sin, Tensor& y,
                               Tensor& y2, bool inverse))

// Flash attention with grouped-query heads (query head h reads kv head h / (Hq / Hkv)).
// q: (B, T, Hq, D); k, v: (B, S, Hkv, D); each with unit stride on D and a stride >= D on
// the sequence axis (other strides arbitrary). causal: query t sees keys s <= t + S - T.
// window > 0 (requires causal; sliding-window attention) additionally hides the keys
// s <= t + S - T - window: query t sees at most the window keys ending at its own position,
// and key tiles wholly outside the window are skipped (O(T window) work). window = 0: none.
// key_mask: undefined (every key is real) or (B, S) i32 contiguous (whatever q's dtype),
// 0 = padded key: it gets no weight. out: (B, T, Hq, D) and lse: (B, Hq, T) contiguous; a
// query row that sees no real key gets out = 0 and lse = -inf.
DARK_DECLARE_KERNEL(flash_attention_forward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& key_mask, Tensor& out, Tensor& lse, bool causal,
                                                  double scale, std::int64_t window))
// out, lse from the forward; dout: (B, T, Hq, D) contiguous. dlse: undefined (lse is not
// an output of the op) or (B, Hq, T) contiguous like lse: the gradient of lse, which enters
// FlashAttention-2's backward as D_i = rowsum(dO * O) - dlse_i (d lse_i / d s_ij = P_ij).
// dq, dk, dv contiguous with q's, k's and v's shapes, written, or with accumulate added to
// (another part's gradients already there; the CPU adds in place, CUDA through temporaries);
// padded keys get dk = dv = 0 (nothing added). Deterministic: fixed summation order,
// independent of the thread count.
DARK_DECLARE_KERNEL(flash_attention_backward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& key_mask, const Tensor& out, const Tensor& lse,
                                                   const Tensor& dout, const Tensor& dlse, Tensor& dq, Tensor& dk,
                                                   Tensor& dv, bool causal, double scale, std::int64_t window,
                                                   bool accumulate))

// Cross entropy over rows of logits: (N, V) with targets: (N) (i32 / i64, read from the
// tensor) contiguous. lse: (N) gets each row's logsumexp (0 for ignored rows); loss (one
// element, logits' dtype) the mean of lse - logit[target] over rows whose target is not
// ignore_index (0 when all are ignored). A target outside [0, V) is an error.
DARK_DECLARE_KERNEL(cross_entropy_forward, void(const Tensor& logits, const Tensor& targets, Tensor& lse,
                                                Tensor& loss, std::int64_t ignore_index))
// dlogits: (N, V) = (softmax - onehot(target)) * dloss / count on counted rows, 0 on
// ignored rows; dloss holds one element.
DARK_DECLARE_KERNEL(cross_entropy_backward, void(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                                 const Tensor& dloss, Tensor& dlogits, std::int64_t ignore_index))

// lse[r] = log(sum_j exp(x[r, j])), max subtracted first, for x: (R, C) contiguous; lse: (R)
// in x's dtype. The per-row part of cross_entropy_forward (linear_cross_entropy's chunks).
DARK_DECLARE_KERNEL(row_logsumexp, void(const Tensor& x, Tensor& lse))
// The gradient of one vocabulary chunk [v0, v0 + C) of the logits (linear_cross_entropy):
// dx[n, j] = (exp(x[n, j] - lse[n]) - [targets[n] == v0 + j]) * scale[n]. x: (N, C)
// contiguous, lse and scale: (N) of x's dtype (scale is 0 on ignored rows), targets: (N) i32 /
// i64 (any values: only equality with v0 + j is read). dx: (N, C) contiguous, x itself (in
// place) or, on CUDA for f32 x, a bf16 tensor: the operand of the bf16 gradient products,
// written rounded once, as a cast of the f32 result would be, without that extra pass.
DARK_DECLARE_KERNEL(cross_entropy_chunk_backward, void(const Tensor& logits, const Tensor& lse, const Tensor& scale,
                                                       const Tensor& targets, std::int64_t v0, Tensor& dlogits))

// Gated activations of the feed-forward block: out = act(gate) * up, elementwise on
// same-shape contiguous tensors (swiglu: act = silu; geglu: act = exact gelu; geglu_tanh:
// act = tanh-approximated gelu, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), Hugging
// Face's gelu_pytorch_tanh, Gemma's).
enum class GluOp : std::uint8_t { swiglu, geglu, geglu_tanh };
DARK_DECLARE_KERNEL(glu_forward, void(GluOp op, const Tensor& gate, const Tensor& up, Tensor& out))
// dgate = dout * up * act'(gate), dup = dout * act(gate), and out = act(gate) * up, the
// forward's output with glu_forward's bits (recomputed here, where a layer needs it again,
// instead of by a second pass over gate and up); each may be undefined (skipped). dout may be
// undefined when only out is wanted.
DARK_DECLARE_KERNEL(glu_backward, void(GluOp op, const Tensor& gate, const Tensor& up, const Tensor& dout,
                                       Tensor& dgate, Tensor& dup, Tensor& out))

// Linear attention on feature logits (autograd/ops/linear_attention.cpp; semantics in
// autograd/ops.h). q: (B, T, Hq, m), k: (B, T, Hkv, m), v: (B, T, Hkv, Dv), out: (B, T, Hq, Dv)
// and den: (B, Hq, T), all contiguous; key_mask: undefined (every key is real) or (B, T) i32
// contiguous (whatever q's dtype), 0 = padded key. den gets each row's guarded denominator
// den + eps (offset-scaled units), which the backward reads. chunk >= 1 positions per chunk.
// log_norm: undefined (not wanted) or (B, Hq, T) contiguous in grad_dtype of q (f32 for f32
// and bf16, f64 for f64): each row's log normaliser in unscaled units,
//   log_norm_t = qoff_t + o_t + log(den_t + eps)   (qoff_t = max_f q[t, f], o_t its key offset),
// -inf for a row that sees no real key. With it two attention states over disjoint key sets
// merge exactly (the exact window: attention/exact_window.h).
DARK_DECLARE_KERNEL(linear_attention_forward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& key_mask, Tensor& out, Tensor& den,
                                                   Tensor& log_norm, bool causal, double eps, std::int64_t chunk))
// out, den from the forward; dout like out, contiguous. dlog_norm: undefined or like
// log_norm, its gradient (offsets held constant, so d log_norm_t / d a_tj = 1 / den'_t: it adds
// dlog_norm_t / den'_t to G_t's last column, the one that meets Vx's ones). dq, dk, dv
// contiguous with q's, k's and v's shapes, written (not accumulated); padded keys get
// dk = dv = 0. Deterministic, independent of the thread count.
DARK_DECLARE_KERNEL(linear_attention_backward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                                    const Tensor& key_mask, const Tensor& out, const Tensor& den,
                                                    const Tensor& dout, const Tensor& dlog_norm, Tensor& dq,
                                                    Tensor& dk, Tensor& dv, bool causal, std::int64_t chunk))

// Sliding-window linear attention (autograd/ops.h, linear_attention with window > 0; CPU
// f32 / f64, CUDA f32 / bf16): causal, query t sees the real keys j with t - window < j <= t,
// and its key offset is the max over those keys alone, so keys that left the window never
// scale a row. Shapes, key_mask, out, den, eps and chunk as for linear_attention_forward /
// _backward (log_norm and dlog_norm too, with o_t the window's offset); window >= 1.
DARK_DECLARE_KERNEL(windowed_linear_attention_forward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                                            const Tensor& key_mask, Tensor& out, Tensor& den,
                                                            Tensor& log_norm, std::int64_t window, double eps,
                                                            std::int64_t chunk))
DARK_DECLARE_KERNEL(windowed_linear_attention_backward,
                    void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, const Tensor& out,
                         const Tensor& den, const Tensor& dout, const Tensor& dlog_norm, Tensor& dq, Tensor& dk,
                         Tensor& dv, std::int64_t window, std::int64_t chunk))

// Random-feature attention with the feature logits computed inside the kernel
// (autograd/ops.h, random_feature_attention): xq: (B, T, Hq, r), xk: (B, T, Hkv, r) the
// transformed queries and keys, v: (B, T, Hkv, Dv), omega: (Hkv, m, r), log_weight: undefined
// or (Hkv, m); key_mask, out, den, log_norm, causal, eps and chunk as for linear_attention. The logits
//   l[t, f] = omega[kv] [f] . x[t] - |x[t]|^2 / 2 - ln(m) / 2 (+ log_weight[kv, f])
// (kv = the row's key/value head) are never stored for the whole sequence.
DARK_DECLARE_KERNEL(random_feature_attention_forward,
                    void(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                         const Tensor& log_weight, const Tensor& key_mask, Tensor& out, Tensor& den,
                         Tensor& log_norm, bool causal, double eps, std::int64_t chunk))
// dlog_norm, dxq, dxk, dv like linear_attention_backward's; domega: (Hkv, m, r) written when
// defined (summed over batch, positions and the query heads of each group in a fixed order).
DARK_DECLARE_KERNEL(random_feature_attention_backward,
                    void(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                         const Tensor& log_weight, const Tensor& key_mask, const Tensor& out, const Tensor& den,
                         const Tensor& dout, const Tensor& dlog_norm, Tensor& dxq, Tensor& dxk, Tensor& dv,
                         Tensor& domega, bool causal, std::int64_t chunk))

// Optimizer updates over flat float32 buffers (param, grad and state contiguous, equal size
// n), one kernel per step for the whole buffer. Weight decay applies to the elements inside
// the ranges of decay_ranges, an (R, 2) i64 tensor of sorted, disjoint [begin, end) offsets
// into the buffers, on their device (R may be 0); it is 0 elsewhere.
// AdamW (decoupled weight decay):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / c1 / (sqrt(v / c2) + eps) + weight_decay * p)
// with bias corrections c1 = 1 - b1^t, c2 = 1 - b2^t passed in.
struct AdamWParams {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  double bias_correction1 = 1, bias_correction2 = 1;
};
DARK_DECLARE_KERNEL(adamw_step, void(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                     const Tensor& decay_ranges, const AdamWParams& p))
// SGD with heavy-ball momentum: u = g + weight_decay p; with momentum, buf = momentum buf + u
// and u = buf; p -= lr u. momentum_buf is not read (and may be undefined) when momentum is 0.
struct SgdParams {
  double lr = 0, momentum = 0, weight_decay = 0;
};
DARK_DECLARE_KERNEL(sgd_step, void(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const Tensor& decay_ranges,
                                   const SgdParams& p))

// The squared L2 norm of a flat float32 buffer by chunks, for the gradient norm in one launch
// whatever the buffer's size: out[c] = sum of x[i]^2 over i in [c chunk, (c + 1) chunk), each
// square and each sum in float64 (a float32 value's square is exact there). x: (C chunk) f32
// contiguous, out: (C) f64 contiguous. The summation order within a chunk depends only on the
// chunk size; it is the order in which `reduce` sums a float64 row of that length on the
// device for chunks over 1024 (the norm's are 4096), so the norm kept its bits.
DARK_DECLARE_KERNEL(chunk_sq_norms, void(const Tensor& x, Tensor& out, std::int64_t chunk))

}  // namespace dark
