// Reductions over axes, and sum_to (the reduction that undoes broadcasting).
// The kernel reduces the middle axis of (outer, n, inner); axes that are not one
// contiguous block are first permuted to the end.
#include <algorithm>
#include <numeric>

#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

namespace ops_detail {
std::vector<int> normalize_axes(const std::vector<int>& axes, std::size_t ndim, const char* op) {
  std::vector<int> out;
  if (axes.empty()) {
    out.resize(ndim);
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (int a : axes) out.push_back(normalize_axis(a, ndim, op));
  std::sort(out.begin(), out.end());
  DARK_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": repeated axis");
  return out;
}
}  // namespace ops_detail

namespace {

// Shape with reduced axes kept as 1.
Shape keepdim_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape s = shape;
  for (int a : axes) s[a] = 1;
  return s;
}

Tensor reduce_forward(ReduceOp op, const Tensor& x, const std::vector<int>& axes) {
  const Shape& shape = x.shape();
  const Shape out_keep = keepdim_shape(shape, axes);
  Tensor src = x;
  std::int64_t outer = 1, n = 1, inner = 1;
  const bool block = axes.empty() || axes.back() - axes.front() + 1 == static_cast<int>(axes.size());
  if (block) {
    for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
      if (!axes.empty() && i < axes.front()) outer *= shape[i];
      else if (!axes.empty() && i > axes.back()) inner *= shape[i];
      else if (!axes.empty()) n *= shape[i];
    }
    src = x.contiguous();
  } else {
    std::vector<int> order;
    for (int i = 0; i < static_cast<int>(shape.size()); ++i)
      if (!std::binary_search(axes.begin(), axes.end(), i)) order.push_back(i), outer *= shape[i];
    for (int a : axes) order.push_back(a), n *= shape[a];
    src = core::permute(x, order).contiguous();
  }
  if (n == 0) DARK_CHECK(op == ReduceOp::sum, reduce_op_name(op), ": cannot reduce over an empty axis of ", x.describe());
  Tensor out = Tensor::empty(out_keep, x.dtype(), x.device());
  kernels::reduce().get(x.device().type, x.dtype())(op, src, out, outer, n, inner);
  return out;
}

Shape drop_axes(const Shape& shape, const std::vector<int>& axes) {
  Shape s;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i)
    if (!std::binary_search(axes.begin(), axes.end(), i)) s.push_back(shape[i]);
  return s;
}

}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int> axes_in, bool keepdim) {
  const char* name = reduce_op_name(op);
  ops_detail::check_defined(name, x);
  if (op != ReduceOp::sum) ops_detail::check_floating(name, x);
  const std::vector<int> axes = ops_detail::normalize_axes(axes_in, x.dim(), name);
  const Tensor out_keep = reduce_forward(op, x, axes);
  Tensor out = keepdim ? out_keep : core::reshape(out_keep, drop_axes(x.shape(), axes));
  if (!should_record({&x})) return out;
  record(name, {x}, {&out}, [op, x, axes, out_keep](BackwardContext& g) {
    const Shape& shape = x.shape();
    const Tensor dy = core::expand(core::reshape(g.out_grad(), out_keep.shape()), shape);
    switch (op) {
      case ReduceOp::sum: g.set_input_grad(0, dy.contiguous()); break;
      case ReduceOp::mean:
        g.set_input_grad(0, mul_scalar(dy, static_cast<double>(out_keep.numel()) / static_cast<double>(x.numel())));
        break;
      case ReduceOp::max:
      case ReduceOp::min: {
        // Ties share the gradient equally (so the total is preserved).
        const Tensor hit = eq(x, core::expand(out_keep, shape));
        const Tensor count = reduce(ReduceOp::sum, hit, axes, true);
        g.set_input_grad(0, div(mul(dy, hit), core::expand(count, shape)));
        break;
      }
      case ReduceOp::logsumexp:
        g.set_input_grad(0, mul(dy, exp(sub(x, core::expand(out_keep, shape)))));
        break;
    }
  });
  return out;
}

Tensor sum(const Tensor& x, std::vector<int> axes, bool keepdim) { return reduce(ReduceOp::sum, x, std::move(axes), keepdim); }
Tensor mean(const Tensor& x, std::vector<int> axes, bool keepdim) { return reduce(ReduceOp::mean, x, std::move(axes), keepdim); }
Tensor max(const Tensor& x, std::vector<int> axes, bool keepdim) { return reduce(ReduceOp::max, x, std::move(axes), keepdim); }
Tensor min(const Tensor& x, std::vector<int> axes, bool keepdim) { return reduce(ReduceOp::min, x, std::move(axes), keepdim); }
Tensor logsumexp(const Tensor& x, std::vector<int> axes, bool keepdim) {
  return reduce(ReduceOp::logsumexp, x, std::move(axes), keepdim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  DARK_CHECK(x.dim() >= shape.size(), "sum_to: cannot sum ", x.describe(), " to ", shape_str(shape));
  const std::size_t lead = x.dim() - shape.size();
  std::vector<int> axes;
  for (std::size_t i = 0; i < x.dim(); ++i) {
    if (i < lead) axes.push_back(static_cast<int>(i));
    else if (shape[i - lead] == 1 && x.shape()[i] != 1) axes.push_back(static_cast<int>(i));
    else DARK_CHECK(shape[i - lead] == x.shape()[i], "sum_to: cannot sum ", x.describe(), " to ", shape_str(shape));
  }
  if (axes.empty()) return reshape(x, shape);
  return reshape(sum(x, axes, true), shape);
}

}  // namespace dark
