// Indexing ops: embedding and index_select are gathers along one axis; their backward is
// a deterministic scatter-add into zeros.
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/weights.h"

namespace dark {
namespace {

// The backward of a gather of (outer, n, inner) rows at `index`: dout scattered into a `dtype`
// gradient of input 0, written into its zeroed gradient buffer where the tape offers one (an
// embedding not tied to an LM head that wrote it first: no zeros to write, no sum to add
// after), else into zeros. `dtype` is dout's, or f32 for bf16 dout (an f32 master weight's).
void set_gather_grad(BackwardContext& g, const Tensor& index, const Shape& shape, DType dtype, std::int64_t outer,
                     std::int64_t n, std::int64_t inner) {
  const Tensor dout = g.out_grad().contiguous();
  Tensor dx = dtype == grad_dtype(dtype) ? g.take_zeroed_grad(0) : Tensor();  // buffers are grad_dtype
  const bool into_buffer = dx.defined();
  if (!into_buffer) dx = Tensor::zeros(shape, dtype, dout.device());
  kernels::scatter_add().get(dout.device().type, dout.dtype())(dout, index, dx, outer, n, inner);
  if (!into_buffer) g.set_input_grad(0, dx);
}

}  // namespace

Tensor index_select(const Tensor& x_in, int axis_in, const Tensor& index_in) {
  ops_detail::check_defined("index_select", x_in);
  ops_detail::check_index("index_select", index_in);
  DARK_CHECK(index_in.dim() == 1, "index_select: index must be 1-D, got ", index_in.describe());
  DARK_CHECK(index_in.device() == x_in.device(), "index_select: device mismatch: ", x_in.describe(), " vs index ",
             index_in.describe());
  const int axis = normalize_axis(axis_in, x_in.dim(), "index_select");
  const Tensor x = x_in.contiguous();
  const Tensor index = index_in.contiguous();
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= x.shape()[i];
  for (std::size_t i = axis + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  const std::int64_t n = x.shape()[axis];
  Shape out_shape = x.shape();
  out_shape[axis] = index.numel();
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  kernels::gather().get(x.device().type, x.dtype())(x, index, out, outer, n, inner);
  if (should_record({&x_in})) {
    record("index_select", {x_in}, {&out},
           [shape = x.shape(), dtype = x.dtype(), index, outer, n, inner](BackwardContext& g) {
             set_gather_grad(g, index, shape, dtype, outer, n, inner);
           });
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  ops_detail::check_floating("embedding", weight);
  ops_detail::check_index("embedding", ids);
  DARK_CHECK(weight.dim() == 2, "embedding: weight must be (V, D), got ", weight.describe());
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.shape()[1]);
  return reshape(index_select(weight, 0, core::reshape(ids, {ids.numel()})), out_shape);
}

Tensor embedding(const Tensor& weight, const Tensor& ids, DType dtype) {
  if (dtype == weight.dtype()) return embedding(weight, ids);
  const Tensor copy = live_weight_copy(weight, dtype);
  // No step's copy (evaluation, generation): the rows, then their cast, not the whole table's.
  if (!copy.defined()) return to_dtype(embedding(weight, ids), dtype);
  Tensor rows;
  {
    NoGradGuard no_grad;  // the copy's gather; the entry below differentiates the weight
    rows = embedding(copy, ids);
  }
  if (should_record({&weight})) {
    // The bf16 gradients summed into the weight's f32 one.
    record("embedding", {weight}, {&rows},
           [shape = weight.shape(), dtype = weight.dtype(), ids = core::reshape(ids.contiguous(), {ids.numel()})](
               BackwardContext& g) { set_gather_grad(g, ids, shape, dtype, 1, shape[0], shape[1]); });
  }
  return rows;
}

}  // namespace dark
