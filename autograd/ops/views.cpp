// Differentiable views and layout changes. Forward shares storage where possible;
// backward maps the gradient back through the inverse view.
#include <numeric>

#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

Tensor reshape(const Tensor& x, Shape shape) {
  ops_detail::check_defined("reshape", x);
  Tensor out = core::reshape(x, std::move(shape));
  if (should_record({&x}))
    record("reshape", {x}, {&out}, [in = x.shape()](BackwardContext& g) { g.set_input_grad(0, reshape(g.out_grad(), in)); });
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int>& order) {
  ops_detail::check_defined("permute", x);
  Tensor out = core::permute(x, order);
  if (should_record({&x})) {
    std::vector<int> inverse(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) inverse[normalize_axis(order[i], x.dim(), "permute")] = static_cast<int>(i);
    record("permute", {x}, {&out}, [inverse](BackwardContext& g) { g.set_input_grad(0, core::permute(g.out_grad(), inverse)); });
  }
  return out;
}

Tensor transpose(const Tensor& x, int axis0, int axis1) {
  ops_detail::check_defined("transpose", x);
  std::vector<int> order(x.dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_axis(axis0, x.dim(), "transpose")], order[normalize_axis(axis1, x.dim(), "transpose")]);
  return permute(x, order);
}

Tensor slice(const Tensor& x, int axis, std::int64_t start, std::int64_t end, std::int64_t step) {
  ops_detail::check_defined("slice", x);
  Tensor out = core::slice(x, axis, start, end, step);
  if (should_record({&x})) {
    // Re-derive the clamped start from the view's offset so backward writes the same elements.
    const int a = normalize_axis(axis, x.dim(), "slice");
    const std::int64_t first = x.strides()[a] == 0 ? 0 : (out.offset() - x.offset()) / x.strides()[a];
    record("slice", {x}, {&out}, [shape = x.shape(), a, first, step, n = out.shape()[a]](BackwardContext& g) {
      Tensor dx = Tensor::zeros(shape, g.out_grad().dtype(), g.out_grad().device());
      Tensor window = core::slice(dx, a, first, first + (n - 1) * step + 1, step);
      window.copy_(g.out_grad());
      g.set_input_grad(0, dx);
    });
  }
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  ops_detail::check_defined("expand", x);
  Tensor out = core::expand(x, shape);
  if (should_record({&x}))
    record("expand", {x}, {&out}, [in = x.shape()](BackwardContext& g) { g.set_input_grad(0, sum_to(g.out_grad(), in)); });
  return out;
}

Tensor unsqueeze(const Tensor& x, int axis) {
  ops_detail::check_defined("unsqueeze", x);
  Shape shape = x.shape();
  shape.insert(shape.begin() + normalize_axis(axis, x.dim() + 1, "unsqueeze"), 1);
  return reshape(x, shape);
}

Tensor squeeze(const Tensor& x, int axis) {
  ops_detail::check_defined("squeeze", x);
  return reshape(x, core::squeeze(x, axis).shape());
}

Tensor contiguous(const Tensor& x) {
  ops_detail::check_defined("contiguous", x);
  if (x.is_contiguous()) return x;
  Tensor out = x.contiguous();
  if (should_record({&x}))
    record("contiguous", {x}, {&out}, [](BackwardContext& g) { g.set_input_grad(0, g.out_grad()); });
  return out;
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  ops_detail::check_defined("to_dtype", x);
  if (x.dtype() == dtype) return x;
  Tensor out = x.to(dtype);
  if (should_record({&x})) {
    DARK_CHECK(is_floating(dtype), "to_dtype: cannot differentiate a cast of ", x.describe(), " to ", dtype_name(dtype));
    // The bf16 gradient of an f32 tensor cast to bf16 (mixed precision's weights) is passed on
    // as it is: the tape sums gradients of bf16 in f32 (grad_dtype) and widens it exactly where
    // it sums, so a weight's gradient goes into the f32 buffer in one pass with no f32 copy
    // first. Other casts give the input's dtype here.
    const bool bf16_of_f32 = x.dtype() == DType::f32 && dtype == DType::bf16;
    record("to_dtype", {x}, {&out}, [from = x.dtype(), bf16_of_f32](BackwardContext& g) {
      g.set_input_grad(0, bf16_of_f32 ? g.out_grad() : g.out_grad().to(from));
    });
  }
  return out;
}

}  // namespace dark
