// softmax and log_softmax along one axis. Kernels work on the last axis; other axes are
// transposed there and back.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

Tensor softmax_impl(const Tensor& x, int axis_in, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  ops_detail::check_floating(name, x);
  DARK_CHECK(x.dim() >= 1, name, ": needs at least one axis, got ", x.describe());
  const int axis = normalize_axis(axis_in, x.dim(), name);
  const int last = static_cast<int>(x.dim()) - 1;
  const Tensor src = core::transpose(x, axis, last).contiguous();
  Tensor y_last = Tensor::empty(src.shape(), src.dtype(), src.device());
  kernels::softmax_forward().get(x.device().type, x.dtype())(src, y_last, log);
  Tensor y = core::transpose(y_last, axis, last);
  if (should_record({&x})) {
    record(name, {x}, {&y}, [y_last, axis, last, log](BackwardContext& g) {
      const Tensor dy = core::transpose(g.out_grad(), axis, last).contiguous();
      Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
      kernels::softmax_backward().get(dy.device().type, dy.dtype())(y_last, dy, dx, log);
      g.set_input_grad(0, core::transpose(dx, axis, last).contiguous());
    });
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int axis) { return softmax_impl(x, axis, false); }
Tensor log_softmax(const Tensor& x, int axis) { return softmax_impl(x, axis, true); }

}  // namespace dark
