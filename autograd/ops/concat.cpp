// concat copies the parts into slices of one output; split returns differentiable
// slices (views) of its input.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

Tensor concat(const std::vector<Tensor>& parts, int axis_in) {
  DARK_CHECK(!parts.empty(), "concat: no tensors given");
  const Tensor& first = parts[0];
  ops_detail::check_defined("concat", first);
  const int axis = normalize_axis(axis_in, first.dim(), "concat");
  Shape shape = first.shape();
  shape[axis] = 0;
  std::vector<std::int64_t> sizes;
  for (const Tensor& p : parts) {
    ops_detail::check_same("concat", first, p);
    DARK_CHECK(p.dim() == first.dim(), "concat: rank mismatch: ", first.describe(), " vs ", p.describe());
    for (std::size_t i = 0; i < p.dim(); ++i)
      DARK_CHECK(static_cast<int>(i) == axis || p.shape()[i] == first.shape()[i], "concat: shapes ",
                 shape_str(first.shape()), " and ", shape_str(p.shape()), " differ outside axis ", axis);
    sizes.push_back(p.shape()[axis]);
    shape[axis] += p.shape()[axis];
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::int64_t start = 0;
  for (const Tensor& p : parts) {
    Tensor window = core::slice(out, axis, start, start + p.shape()[axis]);
    window.copy_(p);
    start += p.shape()[axis];
  }
  if (should_record(parts)) {
    record("concat", parts, {&out}, [axis, sizes](BackwardContext& g) {
      std::int64_t begin = 0;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        if (g.needs_grad(i)) g.set_input_grad(i, core::slice(g.out_grad(), axis, begin, begin + sizes[i]).contiguous());
        begin += sizes[i];
      }
    });
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, int axis_in) {
  ops_detail::check_defined("split", x);
  const int axis = normalize_axis(axis_in, x.dim(), "split");
  std::int64_t total = 0;
  for (auto s : sizes) {
    DARK_CHECK(s >= 0, "split: negative size ", s);
    total += s;
  }
  DARK_CHECK(total == x.shape()[axis], "split: sizes add up to ", total, " but axis ", axis, " of ", x.describe(),
             " has length ", x.shape()[axis]);
  std::vector<Tensor> out;
  std::int64_t start = 0;
  for (auto s : sizes) {
    out.push_back(slice(x, axis, start, start + s));
    start += s;
  }
  return out;
}

Tensor pad_last_dim(const Tensor& x, std::int64_t width) {
  DARK_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) <= width, "pad_last_dim: ", x.describe(), " is wider than ", width);
  const std::int64_t r = x.size(x.dim() - 1);
  if (r == width) return x;
  Shape zeros = x.shape();
  zeros[zeros.size() - 1] = width - r;
  return concat({x, Tensor::zeros(zeros, x.dtype(), x.device())}, x.dim() - 1);
}

}  // namespace dark
