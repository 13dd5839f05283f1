// Elementwise unary ops. The derivative of each lives in the device kernels
// (unary_backward), which receive x and y = f(x).
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

Tensor unary(UnaryOp op, const Tensor& x_in, double alpha) {
  const char* name = unary_op_name(op);
  ops_detail::check_floating(name, x_in);
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::unary_forward().get(x.device().type, x.dtype())(op, x, y, alpha);
  if (should_record({&x_in})) {
    record(name, {x_in}, {&y}, [op, x, y = y.detach(), alpha](BackwardContext& g) {
      const Tensor dy = g.out_grad().contiguous();
      Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      kernels::unary_backward().get(x.device().type, x.dtype())(op, x, y, dy, dx, alpha);
      g.set_input_grad(0, dx);
    });
  }
  return y;
}

Tensor neg(const Tensor& x) { return unary(UnaryOp::neg, x); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::exp, x); }
Tensor log(const Tensor& x) { return unary(UnaryOp::log, x); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::rsqrt, x); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::sigmoid, x); }
Tensor silu(const Tensor& x) { return unary(UnaryOp::silu, x); }
Tensor gelu(const Tensor& x) { return unary(UnaryOp::gelu, x); }
Tensor gelu_tanh(const Tensor& x) { return unary(UnaryOp::gelu_tanh, x); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::relu, x); }
Tensor abs(const Tensor& x) { return unary(UnaryOp::abs, x); }
Tensor square(const Tensor& x) { return unary(UnaryOp::square, x); }
Tensor sin(const Tensor& x) { return unary(UnaryOp::sin, x); }
Tensor cos(const Tensor& x) { return unary(UnaryOp::cos, x); }
Tensor reciprocal(const Tensor& x) { return unary(UnaryOp::reciprocal, x); }
Tensor add_scalar(const Tensor& x, double value) { return unary(UnaryOp::add_scalar, x, value); }
Tensor mul_scalar(const Tensor& x, double value) { return unary(UnaryOp::mul_scalar, x, value); }
Tensor pow_scalar(const Tensor& x, double exponent) { return unary(UnaryOp::pow_scalar, x, exponent); }

}  // namespace dark
