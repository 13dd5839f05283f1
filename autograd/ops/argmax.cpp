// argmax along the last axis: an index, so nothing is recorded (see autograd/ops.h).
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

Tensor argmax(const Tensor& x) {
  ops_detail::check_floating("argmax", x);
  DARK_CHECK(x.dim() >= 1 && x.size(static_cast<std::int64_t>(x.dim()) - 1) >= 1,
             "argmax: needs a non-empty last axis, got ", x.describe());
  const Tensor src = x.contiguous();
  Shape rows = x.shape();
  rows.pop_back();
  Tensor out = Tensor::empty(rows, DType::i64, x.device());
  kernels::argmax().get(x.device().type, x.dtype())(src, out);
  return out;
}

}  // namespace dark
