// RMSNorm, fused: y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2, last axis) + eps);
// and add_rms_norm, the residual add before it in the same kernels. One tape entry; it saves
// x (the sum), weight and the per-row rstd, and the backward kernel computes
//   dx = rstd * (w * dy) - x * rstd^3 * mean(w * dy * x),  dweight = sum over rows of dy * x * rstd.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

namespace {

// Checks x (and residual, when defined) against weight and returns the rows of the last axis.
std::int64_t checked_rows(const char* name, const Tensor& x, const Tensor& residual, const Tensor& weight, double eps) {
  ops_detail::check_floating(name, x);
  ops_detail::check_same(name, x, weight);
  if (residual.defined()) {
    ops_detail::check_same(name, x, residual);
    DARK_CHECK(residual.shape() == x.shape(), name, ": x and residual must have the same shape, got ", x.describe(),
               " and ", residual.describe());
  }
  DARK_CHECK(x.dim() >= 1, name, ": x needs at least one axis, got ", x.describe());
  const std::int64_t d = x.shape().back();
  DARK_CHECK(weight.dim() == 1 && weight.shape()[0] == d, name, ": weight must be (", d, ") to match the last axis of x ",
             x.describe(), ", got ", weight.describe());
  DARK_CHECK(eps >= 0, name, ": eps must be >= 0, got ", eps);
  return d == 0 ? 0 : x.numel() / d;
}

// The backward of both ops: dx (plus the sum's gradient dsum when defined) and dweight from
// the normed tensor x.
void rms_norm_grads(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                    const Tensor& dsum, bool want_x, bool want_weight, Tensor& dx, Tensor& dweight) {
  if (want_x) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (want_weight) dweight = Tensor::empty(weight.shape(), weight.dtype(), weight.device());
  kernels::rms_norm_backward().get(x.device().type, x.dtype())(x, weight, rstd, dy.contiguous(), dx, dweight,
                                                               dsum.defined() ? dsum.contiguous() : dsum);
}

}  // namespace

Tensor rms_norm(const Tensor& x_in, const Tensor& weight_in, double eps) {
  const std::int64_t rows = checked_rows("rms_norm", x_in, Tensor(), weight_in, eps);
  const Tensor x = x_in.contiguous();
  const Tensor weight = weight_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, grad_dtype(x.dtype()), x.device());
  Tensor no_sum;
  kernels::rms_norm_forward().get(x.device().type, x.dtype())(x, weight, y, rstd, eps, Tensor(), no_sum);
  if (should_record({&x_in, &weight_in})) {
    record("rms_norm", {x_in, weight_in}, {&y},
           [x = x.detach(), weight = weight.detach(), rstd](BackwardContext& g) {
             Tensor dx, dweight;
             rms_norm_grads(x, weight, rstd, g.out_grad(), Tensor(), g.needs_grad(0), g.needs_grad(1), dx, dweight);
             if (dx.defined()) g.set_input_grad(0, dx);
             if (dweight.defined()) g.set_input_grad(1, dweight);
           });
  }
  return y;
}

SumAndNorm add_rms_norm(const Tensor& x_in, const Tensor& residual_in, const Tensor& weight_in, double eps) {
  const std::int64_t rows = checked_rows("add_rms_norm", x_in, residual_in, weight_in, eps);
  const Tensor x = x_in.contiguous(), residual = residual_in.contiguous(), weight = weight_in.contiguous();
  SumAndNorm out{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(x.shape(), x.dtype(), x.device())};
  Tensor rstd = Tensor::empty({rows}, grad_dtype(x.dtype()), x.device());
  kernels::rms_norm_forward().get(x.device().type, x.dtype())(x, weight, out.normed, rstd, eps, residual, out.sum);
  if (should_record({&x_in, &residual_in, &weight_in})) {
    record("add_rms_norm", {x_in, residual_in, weight_in}, {&out.sum, &out.normed},
           [s = out.sum.detach(), weight = weight.detach(), rstd](BackwardContext& g) {
             // x and residual both get ds + the norm's dx: one tensor, as add gives both its dy.
             // Where only the norm is used (the final norm of a model), there is no ds to add.
             Tensor dx, dweight;
             rms_norm_grads(s, weight, rstd, g.out_grad(1), g.has_out_grad(0) ? g.out_grad(0) : Tensor(),
                            g.needs_grad(0) || g.needs_grad(1), g.needs_grad(2), dx, dweight);
             if (g.needs_grad(0)) g.set_input_grad(0, dx);
             if (g.needs_grad(1)) g.set_input_grad(1, dx);
             if (dweight.defined()) g.set_input_grad(2, dweight);
           });
  }
  return out;
}

}  // namespace dark
