// RMSNorm, fused: y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2, last axis) + eps);
// and add_rms_norm, the residual add before it in the same kernels. One tape entry; it saves
// x (the sum), weight and the per-row rstd, and the backward kernel computes
//   dx = rstd * (w * dy) - x * rstd^3 * mean(w * dy * x),  dweight = sum over rows of dy * x * rstd.
// The weight may be an f32 master weight of bf16 activations, as in linear (autograd/weights.h):
// the kernels use its copy in the step's cast of every weight (no cast of their own), and its
// gradient is the kernel's f32 sum, unrounded, written into the weight's zeroed gradient
// buffer where the tape offers it.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/weights.h"

namespace dark {

namespace {

// Checks x (and residual, when defined) against weight and returns the rows of the last axis.
std::int64_t checked_rows(const char* name, const Tensor& x, const Tensor& residual, const Tensor& weight, double eps) {
  ops_detail::check_floating(name, x);
  ops_detail::check_defined(name, weight);
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

// The backward of both ops: dx (plus the sum's gradient dsum when defined) and, into input
// `weight_input`'s gradient, dweight from the normed tensor x. `weight` is what the kernels
// multiplied by (in x's dtype), `master_dtype` the weight's own.
void rms_norm_grads(BackwardContext& g, const Tensor& x, const Tensor& weight, DType master_dtype, const Tensor& rstd,
                    const Tensor& dy, const Tensor& dsum, bool want_x, std::size_t weight_input, Tensor& dx) {
  Tensor dweight;
  bool into_buffer = false;
  if (g.needs_grad(weight_input)) {
    dweight = take_weight_grad_buffer(g, weight_input, weight.shape(), master_dtype);
    into_buffer = dweight.defined();
    if (!into_buffer) dweight = Tensor::empty(weight.shape(), grad_dtype(master_dtype), weight.device());
  }
  if (want_x) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::rms_norm_backward().get(x.device().type, x.dtype())(x, weight, rstd, dy.contiguous(), dx, dweight,
                                                               dsum.defined() ? dsum.contiguous() : dsum);
  if (dweight.defined() && !into_buffer) g.set_input_grad(weight_input, dweight);
}

}  // namespace

Tensor rms_norm(const Tensor& x_in, const Tensor& weight_in, double eps) {
  const std::int64_t rows = checked_rows("rms_norm", x_in, Tensor(), weight_in, eps);
  const Tensor x = x_in.contiguous();
  const Tensor weight = weight_for("rms_norm", weight_in, x.dtype(), x.device()).contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, grad_dtype(x.dtype()), x.device());
  Tensor no_sum;
  kernels::rms_norm_forward().get(x.device().type, x.dtype())(x, weight, y, rstd, eps, Tensor(), no_sum);
  if (should_record({&x_in, &weight_in})) {
    record("rms_norm", {x_in, weight_in}, {&y},
           [x = x.detach(), weight = weight.detach(), master = weight_in.dtype(), rstd](BackwardContext& g) {
             Tensor dx;
             rms_norm_grads(g, x, weight, master, rstd, g.out_grad(), Tensor(), g.needs_grad(0), 1, dx);
             if (dx.defined()) g.set_input_grad(0, dx);
           });
  }
  return y;
}

SumAndNorm add_rms_norm(const Tensor& x_in, const Tensor& residual_in, const Tensor& weight_in, double eps) {
  const std::int64_t rows = checked_rows("add_rms_norm", x_in, residual_in, weight_in, eps);
  const Tensor x = x_in.contiguous(), residual = residual_in.contiguous();
  const Tensor weight = weight_for("add_rms_norm", weight_in, x.dtype(), x.device()).contiguous();
  SumAndNorm out{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(x.shape(), x.dtype(), x.device())};
  Tensor rstd = Tensor::empty({rows}, grad_dtype(x.dtype()), x.device());
  kernels::rms_norm_forward().get(x.device().type, x.dtype())(x, weight, out.normed, rstd, eps, residual, out.sum);
  if (should_record({&x_in, &residual_in, &weight_in})) {
    record("add_rms_norm", {x_in, residual_in, weight_in}, {&out.sum, &out.normed},
           [s = out.sum.detach(), weight = weight.detach(), master = weight_in.dtype(), rstd](BackwardContext& g) {
             // x and residual both get ds + the norm's dx: one tensor, as add gives both its dy.
             // Where only the norm is used (the final norm of a model), there is no ds to add.
             Tensor dx;
             rms_norm_grads(g, s, weight, master, rstd, g.out_grad(1), g.has_out_grad(0) ? g.out_grad(0) : Tensor(),
                            g.needs_grad(0) || g.needs_grad(1), 2, dx);
             if (g.needs_grad(0)) g.set_input_grad(0, dx);
             if (g.needs_grad(1)) g.set_input_grad(1, dx);
           });
  }
  return out;
}

}  // namespace dark
