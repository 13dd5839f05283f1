// Inverted dropout, fused: one kernel each way, and 1 bit per element kept for backward (the
// kept units), where the ops written out kept the scaled mask, a tensor the size of x.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

Tensor dropout(const Tensor& x_in, double p, std::uint64_t seed, const RandomStream& stream) {
  ops_detail::check_floating("dropout", x_in);
  DARK_CHECK(p >= 0.0 && p < 1.0, "dropout: probability must be in [0, 1), got ", p);
  if (p == 0.0) return x_in;
  DARK_CHECK(!stream.offset.defined() || (stream.offset.dtype() == DType::i64 && stream.offset.numel() == 1 &&
                                          stream.offset.device() == x_in.device()),
             "dropout: the stream offset must be one i64 on ", x_in.device().to_string(), ", got ",
             stream.offset.describe());
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor kept = Tensor::empty({(x.numel() + 31) / 32}, DType::i32, x.device());
  kernels::dropout_forward().get(x.device().type, x.dtype())(x, y, kept, p, seed, stream.base, stream.offset);
  if (should_record({&x_in})) {
    record("dropout", {x_in}, {&y}, [p, kept](BackwardContext& g) {
      const Tensor dy = g.out_grad().contiguous();
      Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
      kernels::dropout_backward().get(dy.device().type, dy.dtype())(dy, kept, dx, p);
      g.set_input_grad(0, dx);
    });
  }
  return y;
}

}  // namespace dark
