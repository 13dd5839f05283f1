// where / masked_fill: elementwise selection with broadcasting. The condition is not
// differentiated; each branch receives the gradient where it was selected.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

Tensor where(const Tensor& cond_in, const Tensor& a, const Tensor& b) {
  ops_detail::check_same("where", a, b);
  ops_detail::check_defined("where", cond_in);
  DARK_CHECK(cond_in.device() == a.device(), "where: device mismatch: condition ", cond_in.describe(), " vs ",
             a.describe());
  const Shape shape = broadcast_shapes(broadcast_shapes(cond_in.shape(), a.shape(), "where"), b.shape(), "where");
  // The kernel reads the condition in the values' dtype; cast it (nonzero stays nonzero).
  const Tensor cond = cond_in.dtype() == a.dtype() ? cond_in : ne(cond_in, Tensor::zeros({}, cond_in.dtype(), cond_in.device())).to(a.dtype());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  kernels::where().get(a.device().type, a.dtype())(core::expand(cond, shape), core::expand(a, shape),
                                                   core::expand(b, shape), out);
  if (should_record({&a, &b})) {
    record("where", {cond, a, b}, {&out}, [cond, sa = a.shape(), sb = b.shape()](BackwardContext& g) {
      const Tensor& dy = g.out_grad();
      const Tensor zero = Tensor::zeros({}, dy.dtype(), dy.device());
      if (g.needs_grad(1)) g.set_input_grad(1, sum_to(where(cond, dy, zero), sa));
      if (g.needs_grad(2)) g.set_input_grad(2, sum_to(where(cond, zero, dy), sb));
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  ops_detail::check_defined("masked_fill", x);
  return where(mask, Tensor::full({}, value, x.dtype(), x.device()), x);
}

}  // namespace dark
