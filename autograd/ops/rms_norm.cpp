// RMSNorm, fused: y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2, last axis) + eps).
// One tape entry; it saves x, weight and the per-row rstd, and the backward kernel computes
//   dx = rstd * (w * dy) - x * rstd^3 * mean(w * dy * x),  dweight = sum over rows of dy * x * rstd.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

Tensor rms_norm(const Tensor& x_in, const Tensor& weight_in, double eps) {
  ops_detail::check_floating("rms_norm", x_in);
  ops_detail::check_same("rms_norm", x_in, weight_in);
  DARK_CHECK(x_in.dim() >= 1, "rms_norm: x needs at least one axis, got ", x_in.describe());
  const std::int64_t d = x_in.shape().back();
  DARK_CHECK(weight_in.dim() == 1 && weight_in.shape()[0] == d, "rms_norm: weight must be (", d,
             ") to match the last axis of x ", x_in.describe(), ", got ", weight_in.describe());
  DARK_CHECK(eps >= 0, "rms_norm: eps must be >= 0, got ", eps);
  const Tensor x = x_in.contiguous();
  const Tensor weight = weight_in.contiguous();
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, grad_dtype(x.dtype()), x.device());
  kernels::rms_norm_forward().get(x.device().type, x.dtype())(x, weight, y, rstd, eps);
  if (should_record({&x_in, &weight_in})) {
    record("rms_norm", {x_in, weight_in}, {&y},
           [x = x.detach(), weight = weight.detach(), rstd](BackwardContext& g) {
             const Tensor dy = g.out_grad().contiguous();
             Tensor dx, dweight;
             if (g.needs_grad(0)) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
             if (g.needs_grad(1)) dweight = Tensor::empty(weight.shape(), weight.dtype(), weight.device());
             kernels::rms_norm_backward().get(x.device().type, x.dtype())(x, weight, rstd, dy, dx, dweight);
             if (dx.defined()) g.set_input_grad(0, dx);
             if (dweight.defined()) g.set_input_grad(1, dweight);
           });
  }
  return y;
}

}  // namespace dark
