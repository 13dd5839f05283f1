// The LM head and its cross entropy, fused over chunks of tokens: the (N, V) logits of a
// batch never exist at once, and nothing is computed twice.
//
// Per chunk of `chunk` rows of hidden: logits (R, V) = hidden_r W^T in the accumulation
// dtype (f32 for f32 and bf16, whose gemm writes f32 directly), each row's logsumexp over the
// whole vocabulary (row_logsumexp), and, when the op is recorded, the gradient right away:
// P = (softmax - onehot) * scale (cross_entropy_chunk_backward; scale = 1 / count on counted
// rows, 0 on ignored ones; in place, or written as bf16 for bf16 products), then
// dhidden_r = P W and dW += P^T hidden_r. The loss's gradient g is only known in backward,
// which scales the two by it (the loss is linear in nothing else). Vocabulary chunks, the
// other way round, need every row's logsumexp before any P, so their backward recomputed
// the logits: a quarter more products than the head's forward and backward.
//
// The target logits are gathered rows of W dotted with hidden.
#include <algorithm>
#include <cstdint>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/weights.h"

namespace dark {
namespace {

// a[r] . b[r] for the rows of a, b: (N, D), in `acc`. f32 and f64 rows: the products and
// their sum (two kernels). bf16 rows: one batched product of N 1 x D by D x 1 (bf16 in, the
// f32 accumulator out), where casting both to f32 first took four.
Tensor row_dots(const Tensor& a, const Tensor& b, DType acc) {
  if (a.dtype() == acc) return sum(mul(a, b), {1});
  const std::int64_t rows = a.size(0), dim = a.size(1);
  if (rows == 0 || dim == 0) return Tensor::zeros({rows}, acc, a.device());
  Tensor out = Tensor::empty({rows}, acc, a.device());
  GemmShape s;
  s.batch = rows;
  s.m = s.n = 1;
  s.k = dim;
  s.trans_b = true;
  s.lda = s.ldb = dim;
  s.ldc = 1;
  s.batch_stride_a = s.batch_stride_b = dim;
  s.batch_stride_c = 1;
  kernels::matmul().get(a.device().type, a.dtype())(a, b, out, s);
  return out;
}

}  // namespace

std::int64_t linear_cross_entropy_chunk_rows(std::int64_t requested, std::int64_t rows, std::int64_t vocab) {
  const std::int64_t all = std::max<std::int64_t>(rows, 1);
  if (requested > 0) return std::min(requested, all);
  // At most about 2^27 logits (512 MiB in f32) at a time: fewer chunks mean fewer
  // read-modify-write passes over the (V, D) f32 weight gradient, one per chunk. Chunks of
  // equal size, so the memory is no more than the pass count needs.
  const std::int64_t most = std::max<std::int64_t>((std::int64_t{1} << 27) / std::max<std::int64_t>(vocab, 1), 1);
  const std::int64_t chunks = (all + most - 1) / most;
  return (all + chunks - 1) / chunks;
}

Tensor linear_cross_entropy(const Tensor& hidden_in, const Tensor& weight_in, const Tensor& targets_in,
                            std::int64_t ignore_index, std::int64_t chunk) {
  const char* name = "linear_cross_entropy";
  ops_detail::check_floating(name, hidden_in);
  ops_detail::check_defined(name, weight_in);
  ops_detail::check_index(name, targets_in);
  DARK_CHECK(hidden_in.dim() == 2 && weight_in.dim() == 2 && hidden_in.size(1) == weight_in.size(1), name,
             ": hidden must be (N, D) and weight (V, D), got ", hidden_in.describe(), " and ", weight_in.describe());
  DARK_CHECK(targets_in.dim() == 1 && targets_in.size(0) == hidden_in.size(0) && targets_in.device() == hidden_in.device(),
             name, ": targets must be (N) = (", hidden_in.size(0), ") on ", hidden_in.device().to_string(), ", got ",
             targets_in.describe());
  DARK_CHECK(weight_in.size(0) > 0, name, ": the weight has no classes: ", weight_in.describe());
  DARK_CHECK(chunk >= 0, name, ": chunk must be >= 0 (0 = automatic), got ", chunk);
  const Tensor hidden = hidden_in.contiguous(), targets = targets_in.contiguous();
  const Tensor weight = weight_for(name, weight_in, hidden.dtype(), hidden.device()).contiguous();
  const std::int64_t rows = hidden.size(0), vocab = weight.size(0), dim = hidden.size(1);
  const DType acc = grad_dtype(hidden.dtype());
  const std::int64_t step = linear_cross_entropy_chunk_rows(chunk, rows, vocab);
  const bool want_hidden = should_record({&hidden_in}), want_weight = should_record({&weight_in});

  NoGradGuard no_grad;
  const Device device = hidden.device();
  const Tensor real = ne(targets, Tensor::full({}, static_cast<double>(ignore_index), targets.dtype(), device));
  const Tensor counted = real.to(acc);
  const Tensor count = maximum(sum(counted), Tensor::scalar(1.0, acc, device));
  const Tensor safe = where(real, targets, Tensor::zeros({}, targets.dtype(), device));
  // The gradient for a loss gradient of 1; backward multiplies by the real one.
  const Tensor scale = want_hidden || want_weight ? div(counted, count) : Tensor();
  Tensor dhidden = want_hidden ? Tensor::empty({rows, dim}, acc, device) : Tensor();
  Tensor dweight;  // the first chunk's product writes it; no chunk, no gradient
  if (want_weight) dweight = rows > 0 ? Tensor::empty({vocab, dim}, acc, device) : Tensor::zeros({vocab, dim}, acc, device);
  Tensor lse = Tensor::empty({rows}, acc, device);
  for (std::int64_t r0 = 0; r0 < rows; r0 += step) {
    const std::int64_t r1 = std::min(rows, r0 + step);
    const Tensor hidden_r = core::slice(hidden, 0, r0, r1);
    Tensor logits = Tensor::empty({r1 - r0, vocab}, acc, device);
    ops_detail::gemm_into(hidden_r, false, weight, true, logits, 0.0f);
    Tensor lse_r = core::slice(lse, 0, r0, r1);
    kernels::row_logsumexp().get(device.type, acc)(logits, lse_r);
    if (!scale.defined()) continue;
    // P in the products' dtype: over the logits in place (f32, f64), or written as bf16.
    Tensor p = hidden.dtype() == acc ? logits : Tensor::empty(logits.shape(), hidden.dtype(), device);
    kernels::cross_entropy_chunk_backward().get(device.type, acc)(logits, lse_r, core::slice(scale, 0, r0, r1),
                                                                  core::slice(targets, 0, r0, r1), 0, p);
    logits = Tensor();  // freed before the products when p is a copy
    if (want_hidden) {
      Tensor dhidden_r = core::slice(dhidden, 0, r0, r1);
      ops_detail::gemm_into(p, false, weight, false, dhidden_r, 0.0f);
    }
    if (want_weight) ops_detail::gemm_into(p, true, hidden_r, false, dweight, r0 == 0 ? 0.0f : 1.0f);
  }
  Tensor target_rows;
  try {
    target_rows = embedding(weight, safe);
  } catch (const Error& e) {
    throw Error(str(name, ": a target is not a class of the ", vocab, "-row weight nor ignore_index (", ignore_index,
                    "): ", e.what()));
  }
  const Tensor target_logit = row_dots(hidden, target_rows.contiguous(), acc);
  Tensor loss = div(sum(mul(sub(lse, target_logit), counted)), count);
  if (!scale.defined()) return loss;
  record(name, {hidden_in, weight_in}, {&loss}, [dhidden, dweight, hidden_dtype = hidden.dtype()](BackwardContext& g) mutable {
    // dhidden scaled in place (it is this entry's own), then cast to hidden's dtype; dweight,
    // in the weight's own dtype (f32 for bf16 hidden: grad_dtype), scaled into the weight's
    // zeroed gradient buffer where the tape offers it.
    if (g.needs_grad(0)) {
      kernels::binary().get(dhidden.device().type, dhidden.dtype())(
          BinaryOp::mul, dhidden, core::expand(g.out_grad(), dhidden.shape()), dhidden);
      g.set_input_grad(0, dhidden.to(hidden_dtype));
    }
    if (g.needs_grad(1)) set_scaled_weight_grad(g, 1, dweight, g.out_grad());
  });
  return loss;
}

}  // namespace dark
