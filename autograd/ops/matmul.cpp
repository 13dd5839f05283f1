// Batched matrix product with transpose flags and broadcast batch axes.
// Operands are passed to the gemm kernel without copying when their last two axes are
// row-major or column-major (a transposed view just flips the transpose flag) and their
// batch axes collapse to a single stride; anything else is made contiguous first.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

struct GemmOperand {
  Tensor base;       // tensor whose data() the strides below index
  bool trans = false;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
};

// `t` already has the full batch shape (expanded) followed by its two matrix axes.
GemmOperand as_operand(const Tensor& t, bool trans, std::int64_t batch) {
  const std::size_t nd = t.dim();
  const std::int64_t rows = t.shape()[nd - 2], cols = t.shape()[nd - 1];
  const std::int64_t rs = t.strides()[nd - 2], cs = t.strides()[nd - 1];
  // One stride for all batch axes (0 when every batch axis is broadcast).
  bool batch_ok = true;
  std::int64_t batch_stride = 0;
  std::int64_t expected = -1;
  for (std::size_t i = nd - 2; i-- > 0;) {
    if (t.shape()[i] == 1) continue;
    if (expected < 0) {
      batch_stride = t.strides()[i];
      expected = t.strides()[i] * t.shape()[i];
    } else if (t.strides()[i] == expected || (batch_stride == 0 && t.strides()[i] == 0)) {
      expected = t.strides()[i] * t.shape()[i];
    } else {
      batch_ok = false;
    }
  }
  if (batch == 1) batch_stride = 0;
  if (batch_ok && (cs == 1 || cols == 1) && rs >= std::max<std::int64_t>(cols, 1))
    return {t, trans, rs, batch_stride};
  if (batch_ok && (rs == 1 || rows == 1) && cs >= std::max<std::int64_t>(rows, 1))
    return {t, !trans, cs, batch_stride};
  const Tensor c = t.contiguous();
  return {c, trans, std::max<std::int64_t>(cols, 1), batch == 1 ? 0 : rows * cols};
}

Tensor matmul_forward(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  ops_detail::check_same("matmul", a, b);
  DARK_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: operands need at least 2 axes, got ", a.describe(), " and ",
             b.describe());
  const std::int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const std::int64_t ka = trans_a ? a.size(-2) : a.size(-1);
  const std::int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  const std::int64_t n = trans_b ? b.size(-2) : b.size(-1);
  DARK_CHECK(ka == kb, "matmul: inner dimensions differ: ", a.describe(), (trans_a ? "^T" : ""), " x ",
             b.describe(), (trans_b ? "^T" : ""));
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  const Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  const Shape batch_shape = broadcast_shapes(batch_a, batch_b, "matmul");
  const std::int64_t batch = numel(batch_shape);

  Shape full_a = batch_shape, full_b = batch_shape, out_shape = batch_shape;
  full_a.insert(full_a.end(), a.shape().end() - 2, a.shape().end());
  full_b.insert(full_b.end(), b.shape().end() - 2, b.shape().end());
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (ka == 0) {
    out.fill_(0.0);
    return out;
  }
  const GemmOperand oa = as_operand(core::expand(a, full_a), trans_a, batch);
  const GemmOperand ob = as_operand(core::expand(b, full_b), trans_b, batch);
  GemmShape s;
  s.batch = batch;
  s.m = m;
  s.n = n;
  s.k = ka;
  s.trans_a = oa.trans;
  s.trans_b = ob.trans;
  s.lda = oa.ld;
  s.ldb = ob.ld;
  s.ldc = n;
  s.batch_stride_a = oa.batch_stride;
  s.batch_stride_b = ob.batch_stride;
  s.batch_stride_c = m * n;
  kernels::matmul().get(a.device().type, a.dtype())(oa.base, ob.base, out, s);
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  Tensor out = matmul_forward(a, b, trans_a, trans_b);
  if (!should_record({&a, &b})) return out;
  record("matmul", {a, b}, {&out}, [a, b, trans_a, trans_b](BackwardContext& g) {
    const Tensor& dc = g.out_grad();
    // C = op(A) op(B); each case writes dA, dB in A's and B's own (untransposed) layout.
    if (g.needs_grad(0)) {
      const Tensor da = trans_a ? matmul(b, dc, trans_b, true) : matmul(dc, b, false, !trans_b);
      g.set_input_grad(0, sum_to(da, a.shape()));
    }
    if (g.needs_grad(1)) {
      const Tensor db = trans_b ? matmul(dc, a, true, trans_a) : matmul(a, dc, !trans_a, false);
      g.set_input_grad(1, sum_to(db, b.shape()));
    }
  });
  return out;
}

}  // namespace dark
