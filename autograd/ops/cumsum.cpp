// Inclusive cumulative sum along one axis; its backward is the reversed cumulative sum.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

Tensor cumsum_impl(const Tensor& x_in, int axis, bool reverse) {
  const Tensor x = x_in.contiguous();
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= x.shape()[i];
  for (std::size_t i = axis + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::cumsum().get(x.device().type, x.dtype())(x, out, outer, x.shape()[axis], inner, reverse);
  return out;
}

}  // namespace

Tensor cumsum(const Tensor& x, int axis_in) {
  ops_detail::check_defined("cumsum", x);
  const int axis = normalize_axis(axis_in, x.dim(), "cumsum");
  Tensor out = cumsum_impl(x, axis, false);
  if (should_record({&x}))
    record("cumsum", {x}, {&out}, [axis](BackwardContext& g) { g.set_input_grad(0, cumsum_impl(g.out_grad(), axis, true)); });
  return out;
}

}  // namespace dark
