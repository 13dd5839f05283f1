// Per-head products on the interleaved (rows, heads, k) layout that attention activations
// have: out[:, h] = x[:, h] w[h / g]^T with g = heads / w_heads. Each head's operand and
// result are read and written where they lie (leading dimension heads * k, heads * n), as one
// strided gemm batch over the w heads per position in the group, so neither side is permuted
// into a heads-first copy, in the forward or the backward. The weight gradient of a shared
// matrix sums its group's heads in head order (deterministic).
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

// One operand of a per-head gemm batch: `base` viewed (rows, heads, width), position j of
// every group, i.e. head w_head * g + j for w_head = 0 .. w_heads - 1.
struct HeadOperand {
  Tensor at;                  // base shifted to head j's first column
  std::int64_t ld = 0;        // heads * width
  std::int64_t batch_stride;  // g * width: from one w head's group to the next
};

HeadOperand head_operand(const Tensor& base, std::int64_t heads, std::int64_t width, std::int64_t group, std::int64_t j) {
  const Tensor flat = core::reshape(base, {base.numel() / (heads * width), heads * width});
  return {core::slice(flat, 1, j * width, (j + 1) * width), heads * width, group * width};
}

void gemm(const HeadOperand& a, bool trans_a, const Tensor& b, bool trans_b, std::int64_t ldb,
          std::int64_t batch_stride_b, const HeadOperand& c, std::int64_t batch, std::int64_t m, std::int64_t n,
          std::int64_t k, float beta) {
  GemmShape s;
  s.batch = batch;
  s.m = m;
  s.n = n;
  s.k = k;
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.lda = a.ld;
  s.ldb = ldb;
  s.ldc = c.ld;
  s.batch_stride_a = a.batch_stride;
  s.batch_stride_b = batch_stride_b;
  s.batch_stride_c = c.batch_stride;
  s.beta = beta;
  Tensor out = c.at;
  kernels::matmul().get(a.at.device().type, a.at.dtype())(a.at, b, out, s);
}

}  // namespace

Tensor per_head_matmul(const Tensor& x_in, const Tensor& w_in) {
  const char* name = "per_head_matmul";
  ops_detail::check_same(name, x_in, w_in);
  DARK_CHECK(x_in.dim() >= 2 && w_in.dim() == 3 && x_in.size(-1) == w_in.size(2) && w_in.size(0) >= 1 &&
                 x_in.size(-2) % w_in.size(0) == 0,
             name, ": expected x (..., heads, k) and w (w_heads, n, k) with w_heads dividing heads, got ",
             x_in.describe(), " and ", w_in.describe());
  const Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const std::int64_t heads = x.size(-2), k = x.size(-1), w_heads = w.size(0), n = w.size(1);
  const std::int64_t group = heads / w_heads, rows = x.numel() / (heads * k);
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  if (k == 0) {
    out.fill_(0.0);
    return out;
  }
  for (std::int64_t j = 0; j < group; ++j)
    gemm(head_operand(x, heads, k, group, j), false, w, true, k, n * k, head_operand(out, heads, n, group, j), w_heads,
         rows, n, k, 0.0f);
  if (!should_record({&x_in, &w_in})) return out;
  record(name, {x_in, w_in}, {&out}, [x = x.detach(), w = w.detach(), heads, k, n, w_heads, group, rows](BackwardContext& g) {
    const Tensor dout = g.out_grad().contiguous();
    if (g.needs_grad(0)) {
      // dx[:, h] = dout[:, h] w[h / g]
      Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      for (std::int64_t j = 0; j < group; ++j)
        gemm(head_operand(dout, heads, n, group, j), false, w, false, k, n * k, head_operand(dx, heads, k, group, j),
             w_heads, rows, k, n, 0.0f);
      g.set_input_grad(0, dx);
    }
    if (g.needs_grad(1)) {
      // dw[v] = sum over the group's heads j of dout[:, v g + j]^T x[:, v g + j]
      Tensor dw = Tensor::empty(w.shape(), w.dtype(), w.device());
      const HeadOperand all_of_dw{dw, k, n * k};
      for (std::int64_t j = 0; j < group; ++j) {
        const HeadOperand xj = head_operand(x, heads, k, group, j);
        gemm(head_operand(dout, heads, n, group, j), true, xj.at, false, xj.ld, xj.batch_stride, all_of_dw, w_heads, n,
             k, rows, j == 0 ? 0.0f : 1.0f);
      }
      g.set_input_grad(1, dw);
    }
  });
  return out;
}

}  // namespace dark
