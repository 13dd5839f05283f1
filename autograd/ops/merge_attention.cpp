// Two attention states over disjoint key sets merged into the attention over their union
// (semantics: autograd/ops.h, merge_attention), composed of elementwise ops so that it runs
// and differentiates wherever they do.
#include "autograd/ops.h"

namespace dark {

Tensor merge_attention(const NormalizedAttention& a, const NormalizedAttention& b) {
  DARK_CHECK(a.out.defined() && b.out.defined() && a.log_norm.defined() && b.log_norm.defined(),
             "merge_attention: both states need out and log_norm");
  DARK_CHECK(a.out.shape() == b.out.shape() && a.out.dim() == 4 && a.out.dtype() == b.out.dtype(),
             "merge_attention: outputs must be (B, T, H, Dv) of one shape and dtype, got ", a.out.describe(), ", ",
             b.out.describe());
  const Shape norm_shape{a.out.size(0), a.out.size(2), a.out.size(1)};
  DARK_CHECK(a.log_norm.shape() == norm_shape && b.log_norm.shape() == norm_shape &&
                 a.log_norm.dtype() == b.log_norm.dtype(),
             "merge_attention: log normalisers must be (B, H, T) = ", shape_str(norm_shape), " of one dtype, got ",
             a.log_norm.describe(), ", ", b.log_norm.describe());
  const DType dt = a.log_norm.dtype();
  const Device dev = a.log_norm.device();
  Tensor d = sub(a.log_norm, b.log_norm);
  // -inf - -inf (a row that sees no key in either set; both outs are 0 there) is NaN: any
  // weight will do. Infinite differences (a row with keys in one set only) are clamped where
  // sigmoid is exactly 0 and 1 in f32 and f64 (exp(-1e4) underflows), so neither the weights
  // nor their gradient meet an inf.
  d = masked_fill(d, ne(d, d), 0.0);
  d = maximum(minimum(d, Tensor::scalar(1e4, dt, dev)), Tensor::scalar(-1e4, dt, dev));
  // (B, H, T) -> (B, T, H, 1) in the outputs' dtype; sigmoid(-d) rather than 1 - s keeps the
  // small weight's digits.
  auto weight = [&](const Tensor& x) { return to_dtype(unsqueeze(transpose(sigmoid(x), 1, 2), 3), a.out.dtype()); };
  return add(mul(weight(d), a.out), mul(weight(neg(d)), b.out));
}

}  // namespace dark
