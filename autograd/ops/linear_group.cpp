// x times several weights as one op (see ops.h): a gated MLP's gate and up projections.
// Where the weights the products use lie side by side in one storage (a ParameterBuffer's
// values, or the step's one cast of them: WeightCopies), the products are one batched GEMM;
// backward, x's gradient sums the products in the GEMM's accumulator (beta = 1) rather than
// in a separate pass over (rows, in) tensors, and where the weights' zeroed gradient buffers
// and the outputs' gradients lie side by side too (glu_backward writes dgate and dup so), the
// weight gradients are one batched GEMM into the buffers. Per gated MLP that is three
// launches fewer per step than two linear ops, and no grad_sum of two (rows, in) tensors.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/weights.h"

namespace dark {

std::int64_t uniform_batch_stride(const std::vector<Tensor>& mats) {
  if (mats.empty() || !mats[0].defined()) return 0;
  const Tensor& first = mats[0];
  const auto fits = [&first](const Tensor& m) {
    return m.defined() && m.dim() == 2 && m.shape() == first.shape() && m.dtype() == first.dtype() &&
           m.device() == first.device() && m.shares_storage(first) && m.is_contiguous();
  };
  if (!fits(first)) return 0;
  if (mats.size() == 1) return std::max<std::int64_t>(first.numel(), 1);
  const std::int64_t stride = mats[1].offset() - first.offset();
  if (stride <= 0 || stride < first.numel()) return 0;  // out of order or overlapping
  for (std::size_t i = 1; i < mats.size(); ++i)
    if (!fits(mats[i]) || mats[i].offset() - mats[i - 1].offset() != stride) return 0;
  return stride;
}

namespace {

// x (rows, in) contiguous, ws[i] (out_i, in) in x's dtype -> x ws[i]^T each.
std::vector<Tensor> products(const Tensor& x, const std::vector<Tensor>& ws) {
  std::vector<Tensor> ys;
  const std::int64_t w_stride = uniform_batch_stride(ws);
  if (w_stride == 0) {
    for (const Tensor& w : ws) ys.push_back(matmul(x, w, false, true));
    return ys;
  }
  const auto n = static_cast<std::int64_t>(ws.size());
  const std::int64_t rows = x.size(0), out = ws[0].size(0);
  Tensor y = Tensor::empty({n, rows, out}, x.dtype(), x.device());
  if (y.numel() > 0) {
    GemmShape s;
    s.batch = n;
    s.m = rows;
    s.n = out;
    s.k = x.size(1);
    s.trans_b = true;
    s.lda = x.size(1);
    s.ldb = ws[0].size(1);
    s.ldc = out;
    s.batch_stride_a = 0;  // every product reads the same x
    s.batch_stride_b = w_stride;
    s.batch_stride_c = rows * out;
    kernels::matmul().get(x.device().type, x.dtype())(x, ws[0], y, s);
  }
  for (std::int64_t i = 0; i < n; ++i) ys.push_back(core::reshape(core::slice(y, 0, i, i + 1), {rows, out}));
  return ys;
}

// Gradients of the weights that need one: dys[i]^T x, into zeroed buffers where offered.
void weight_grads(BackwardContext& g, const std::vector<Tensor>& dys, const Tensor& x,
                  const std::vector<DType>& weight_dtypes) {
  const std::size_t n = dys.size();
  std::vector<Tensor> buffers(n);
  bool all_buffered = true;
  for (std::size_t i = 0; i < n; ++i) {
    if (g.needs_grad(i + 1))
      buffers[i] = take_weight_grad_buffer(g, i + 1, {dys[i].size(1), x.size(1)}, weight_dtypes[i]);
    all_buffered = all_buffered && buffers[i].defined();
  }
  const std::int64_t dy_stride = all_buffered ? uniform_batch_stride(dys) : 0;
  const std::int64_t dw_stride = dy_stride ? uniform_batch_stride(buffers) : 0;
  if (dw_stride && x.size(0) > 0) {  // one batched product into the buffers
    GemmShape s;
    s.batch = static_cast<std::int64_t>(n);
    s.m = dys[0].size(1);
    s.n = x.size(1);
    s.k = x.size(0);
    s.trans_a = true;
    s.lda = dys[0].size(1);
    s.ldb = x.size(1);
    s.ldc = x.size(1);
    s.batch_stride_a = dy_stride;
    s.batch_stride_b = 0;
    s.batch_stride_c = dw_stride;
    kernels::matmul().get(x.device().type, x.dtype())(dys[0], x, buffers[0], s);
    return;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (g.needs_grad(i + 1)) set_weight_grad(g, i + 1, dys[i], x, weight_dtypes[i], buffers[i]);
}

}  // namespace

std::vector<Tensor> linear_group(const Tensor& x, const std::vector<Tensor>& weights) {
  const char* name = "linear_group";
  ops_detail::check_floating(name, x);
  DARK_CHECK(x.dim() == 2 && !weights.empty(), name, ": x must be (rows, in) and at least one weight given, got ",
             x.describe(), " and ", weights.size(), " weights");
  std::vector<Tensor> ws;  // as the products use them: in x's dtype
  std::vector<DType> weight_dtypes;
  for (const Tensor& w : weights) {
    ops_detail::check_defined(name, w);
    DARK_CHECK(w.dim() == 2 && w.size(1) == x.size(1), name, ": weight ", ws.size(), " must be (out, ", x.size(1),
               "), got ", w.describe());
    ws.push_back(weight_for(name, w, x.dtype(), x.device()).detach());
    weight_dtypes.push_back(w.dtype());
  }
  const Tensor xc = x.detach().contiguous();
  std::vector<Tensor> ys = products(xc, ws);
  std::vector<Tensor> inputs = {x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  if (!should_record(inputs)) return ys;
  std::vector<Tensor*> outputs;
  for (Tensor& y : ys) outputs.push_back(&y);
  record(name, inputs, outputs, [x = xc, ws, weight_dtypes](BackwardContext& g) {
    NoGradGuard no_grad;
    std::vector<Tensor> dys;
    for (std::size_t i = 0; i < ws.size(); ++i) dys.push_back(g.out_grad(i).contiguous());
    if (g.needs_grad(0)) {
      Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      if (dx.numel() > 0)  // summed in the products' accumulator: each product adds to the last (beta 1)
        for (std::size_t i = 0; i < ws.size(); ++i) ops_detail::gemm_into(dys[i], false, ws[i], false, dx, i ? 1.0f : 0.0f);
      g.set_input_grad(0, dx);
    }
    weight_grads(g, dys, x, weight_dtypes);
  });
  return ys;
}

}  // namespace dark
