// x weight^T with the weight differentiated as itself, f32 master weights included (see
// autograd/weights.h): the op behind nn::Linear.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/weights.h"

namespace dark {

Tensor linear(const Tensor& x, const Tensor& weight) {
  const char* name = "linear";
  ops_detail::check_floating(name, x);
  DARK_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), name,
             ": x must be (rows, in) and weight (out, in), got ", x.describe(), " and ", weight.describe());
  const Tensor w = weight_for(name, weight, x.dtype(), x.device());
  Tensor y = matmul(x.detach(), w.detach(), false, true);  // the product unrecorded: this op differentiates it
  if (!should_record({&x, &weight})) return y;
  record(name, {x, weight}, {&y}, [x = x.detach(), w = w.detach(), weight_dtype = weight.dtype()](BackwardContext& g) {
    const Tensor dy = g.out_grad().contiguous();
    if (g.needs_grad(0)) g.set_input_grad(0, matmul(dy, w));
    if (g.needs_grad(1)) set_weight_grad(g, 1, dy, x.contiguous(), weight_dtype);
  });
  return y;
}

}  // namespace dark
