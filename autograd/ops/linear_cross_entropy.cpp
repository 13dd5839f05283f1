// The LM head and its cross entropy, fused over vocabulary chunks: the (N, V) logits of a
// batch never exist at once. Forward: per chunk of `chunk` rows of the weight, logits
// (N, Vc) = hidden W_c^T in the accumulation dtype (f32 for f32 and bf16, whose gemm writes
// f32 directly), their row logsumexp merged into the running one; the target logits are
// gathered rows of W dotted with hidden. Backward: per chunk the logits (kept from the
// forward when the whole vocabulary is one chunk: then nothing is recomputed and the memory is
// what a separate head and cross_entropy would keep; recomputed otherwise), turned into
// P = (softmax - onehot) * scale (scale = dloss / count on counted rows, 0 on ignored ones;
// cross_entropy_chunk_backward: in place, or written as bf16 for bf16 products), then
// dhidden += P W_c and dW_c = P^T hidden.
#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

// out = op(a) op(b) (+ beta out) for contiguous 2-D a, b and out (out may be f32 for bf16 a, b).
void gemm_into(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out, float beta) {
  GemmShape s;
  s.m = out.size(0);
  s.n = out.size(1);
  s.k = trans_a ? a.size(0) : a.size(1);
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.lda = a.size(1);
  s.ldb = b.size(1);
  s.ldc = out.size(1);
  s.beta = beta;
  kernels::matmul().get(a.device().type, a.dtype())(a, b, out, s);
}

// Rows per vocabulary chunk: about 2^26 logits (256 MiB in f32) at a time.
std::int64_t chunk_rows(std::int64_t requested, std::int64_t rows, std::int64_t vocab) {
  if (requested > 0) return std::min(requested, vocab);
  return std::min(vocab, std::max<std::int64_t>(256, (std::int64_t{1} << 26) / std::max<std::int64_t>(rows, 1)));
}

Tensor logits_chunk(const Tensor& hidden, const Tensor& weight, std::int64_t v0, std::int64_t v1, DType acc) {
  Tensor logits = Tensor::empty({hidden.size(0), v1 - v0}, acc, hidden.device());
  gemm_into(hidden, false, core::slice(weight, 0, v0, v1), true, logits, 0.0f);
  return logits;
}

// log(exp(a) + exp(b)), elementwise.
Tensor logaddexp(const Tensor& a, const Tensor& b) {
  const Tensor m = maximum(a, b);
  return add(m, log(add(exp(sub(a, m)), exp(sub(b, m)))));
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& hidden_in, const Tensor& weight_in, const Tensor& targets_in,
                            std::int64_t ignore_index, std::int64_t chunk) {
  const char* name = "linear_cross_entropy";
  ops_detail::check_floating(name, hidden_in);
  ops_detail::check_same(name, hidden_in, weight_in);
  ops_detail::check_index(name, targets_in);
  DARK_CHECK(hidden_in.dim() == 2 && weight_in.dim() == 2 && hidden_in.size(1) == weight_in.size(1), name,
             ": hidden must be (N, D) and weight (V, D), got ", hidden_in.describe(), " and ", weight_in.describe());
  DARK_CHECK(targets_in.dim() == 1 && targets_in.size(0) == hidden_in.size(0) && targets_in.device() == hidden_in.device(),
             name, ": targets must be (N) = (", hidden_in.size(0), ") on ", hidden_in.device().to_string(), ", got ",
             targets_in.describe());
  DARK_CHECK(weight_in.size(0) > 0, name, ": the weight has no classes: ", weight_in.describe());
  DARK_CHECK(chunk >= 0, name, ": chunk must be >= 0 (0 = automatic), got ", chunk);
  const Tensor hidden = hidden_in.contiguous(), weight = weight_in.contiguous(), targets = targets_in.contiguous();
  const std::int64_t rows = hidden.size(0), vocab = weight.size(0);
  const DType acc = grad_dtype(hidden.dtype());
  const std::int64_t step = chunk_rows(chunk, rows, vocab);

  Tensor loss, lse, counted, count, safe, kept_logits;
  const bool one_chunk = step >= vocab;
  {
    NoGradGuard no_grad;
    const Tensor real = ne(targets, Tensor::full({}, static_cast<double>(ignore_index), targets.dtype(), targets.device()));
    counted = real.to(acc);
    count = maximum(sum(counted), Tensor::scalar(1.0, acc, hidden.device()));
    safe = where(real, targets, Tensor::zeros({}, targets.dtype(), targets.device()));
    for (std::int64_t v0 = 0; v0 < vocab; v0 += step) {
      const Tensor logits = logits_chunk(hidden, weight, v0, std::min(vocab, v0 + step), acc);
      Tensor lse_c = Tensor::empty({rows}, acc, hidden.device());
      kernels::row_logsumexp().get(logits.device().type, acc)(logits, lse_c);
      lse = v0 == 0 ? lse_c : logaddexp(lse, lse_c);
      if (one_chunk) kept_logits = logits;
    }
    Tensor target_rows;
    try {
      target_rows = embedding(weight, safe);
    } catch (const Error& e) {
      throw Error(str(name, ": a target is not a class of the ", vocab, "-row weight nor ignore_index (", ignore_index,
                      "): ", e.what()));
    }
    const Tensor target_logit = sum(mul(hidden.to(acc), target_rows.to(acc)), {1});
    loss = div(sum(mul(sub(lse, target_logit), counted)), count);
  }
  if (!should_record({&hidden_in, &weight_in})) return loss;
  record(name, {hidden_in, weight_in}, {&loss},
         [hidden = hidden.detach(), weight = weight.detach(), targets, counted, count, lse, kept_logits, acc,
          step](BackwardContext& g) mutable {
           const std::int64_t n = hidden.size(0), v = weight.size(0), d = hidden.size(1);
           const Tensor scale = mul(counted, div(g.out_grad().to(acc), count));  // (N)
           Tensor dh = g.needs_grad(0) ? Tensor::zeros({n, d}, acc, hidden.device()) : Tensor();
           Tensor dw = g.needs_grad(1) ? Tensor::empty({v, d}, acc, hidden.device()) : Tensor();
           for (std::int64_t v0 = 0; v0 < v; v0 += step) {
             const std::int64_t v1 = std::min(v, v0 + step);
             const Tensor logits = kept_logits.defined() ? kept_logits : logits_chunk(hidden, weight, v0, v1, acc);
             kept_logits = Tensor();
             // P in the products' dtype: over the logits in place (f32, f64), or written as bf16.
             Tensor pm = hidden.dtype() == acc ? logits : Tensor::empty(logits.shape(), hidden.dtype(), logits.device());
             kernels::cross_entropy_chunk_backward().get(logits.device().type, acc)(logits, lse, scale, targets, v0, pm);
             if (dh.defined()) gemm_into(pm, false, core::slice(weight, 0, v0, v1), false, dh, 1.0f);
             if (dw.defined()) {
               Tensor rows_of_dw = core::slice(dw, 0, v0, v1);
               gemm_into(pm, true, hidden, false, rows_of_dw, 0.0f);
             }
           }
           if (dh.defined()) g.set_input_grad(0, dh.to(hidden.dtype()));
           if (dw.defined()) g.set_input_grad(1, dw.to(weight.dtype()));
         });
  return loss;
}

}  // namespace dark
