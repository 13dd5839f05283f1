// Elementwise binary ops with numpy broadcasting, and comparisons. Backward reduces each
// operand's gradient back to its own shape with sum_to.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  ops_detail::check_same(name, a, b);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  kernels::binary().get(a.device().type, a.dtype())(op, core::expand(a, shape), core::expand(b, shape), out);
  return out;
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(op, a, b);
  if (is_comparison(op) || !should_record({&a, &b})) return out;
  ops_detail::check_floating(binary_op_name(op), a);
  const Shape sa = a.shape(), sb = b.shape();
  BackwardFn backward;
  switch (op) {
    case BinaryOp::add:
      backward = [sa, sb](BackwardContext& g) {
        if (g.needs_grad(0)) g.set_input_grad(0, sum_to(g.out_grad(), sa));
        if (g.needs_grad(1)) g.set_input_grad(1, sum_to(g.out_grad(), sb));
      };
      break;
    case BinaryOp::sub:
      backward = [sa, sb](BackwardContext& g) {
        if (g.needs_grad(0)) g.set_input_grad(0, sum_to(g.out_grad(), sa));
        if (g.needs_grad(1)) g.set_input_grad(1, neg(sum_to(g.out_grad(), sb)));
      };
      break;
    case BinaryOp::mul:
      backward = [a, b](BackwardContext& g) {
        if (g.needs_grad(0)) g.set_input_grad(0, sum_to(mul(g.out_grad(), b), a.shape()));
        if (g.needs_grad(1)) g.set_input_grad(1, sum_to(mul(g.out_grad(), a), b.shape()));
      };
      break;
    case BinaryOp::div:
      backward = [a, b, out](BackwardContext& g) {
        if (g.needs_grad(0)) g.set_input_grad(0, sum_to(div(g.out_grad(), b), a.shape()));
        // d(a/b)/db = -(a/b)/b
        if (g.needs_grad(1)) g.set_input_grad(1, sum_to(neg(div(mul(g.out_grad(), out), b)), b.shape()));
      };
      break;
    case BinaryOp::maximum:
    case BinaryOp::minimum:
      backward = [a, b, op](BackwardContext& g) {
        // Ties send the whole gradient to a (as max(a, b) = a when a >= b).
        const Tensor a_wins = op == BinaryOp::maximum ? ge(a, b) : le(a, b);
        const Tensor& dy = g.out_grad();
        if (g.needs_grad(0)) g.set_input_grad(0, sum_to(mul(dy, a_wins), a.shape()));
        if (g.needs_grad(1)) g.set_input_grad(1, sum_to(sub(dy, mul(dy, a_wins)), b.shape()));
      };
      break;
    case BinaryOp::pow:
      backward = [a, b, out](BackwardContext& g) {
        const Tensor& dy = g.out_grad();
        if (g.needs_grad(0)) g.set_input_grad(0, sum_to(mul(dy, mul(b, pow(a, add_scalar(b, -1.0)))), a.shape()));
        if (g.needs_grad(1)) g.set_input_grad(1, sum_to(mul(dy, mul(out, log(a))), b.shape()));
      };
      break;
    default:
      return out;
  }
  record(binary_op_name(op), {a, b}, {&out}, std::move(backward));
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::minimum, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(BinaryOp::pow, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(BinaryOp::ge, a, b); }

}  // namespace dark
