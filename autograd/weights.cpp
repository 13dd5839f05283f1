// Mixed precision's weights in the ops that multiply by them (see weights.h).
#include "autograd/weights.h"

#include <string>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

// The live WeightCopies' copies of this thread, by the weights' autograd state (null when none lives).
thread_local std::unordered_map<const AutogradMeta*, Tensor>* live_copies = nullptr;

}  // namespace

WeightCopies::WeightCopies() {
  DARK_CHECK(live_copies == nullptr, "WeightCopies: another one is alive on this thread");
  live_copies = &copies_;
}

WeightCopies::~WeightCopies() { live_copies = nullptr; }

void WeightCopies::add(const Tensor& weight, const Tensor& copy) {
  DARK_CHECK(weight.defined() && weight.is_leaf() && weight.requires_grad(), "WeightCopies: the weight ",
             weight.defined() ? weight.describe() : std::string("(undefined)"), " is not a leaf that requires grad");
  DARK_CHECK(copy.defined() && copy.shape() == weight.shape() && copy.device() == weight.device(),
             "WeightCopies: the copy ", copy.defined() ? copy.describe() : std::string("(undefined)"),
             " does not have the weight's shape and device, ", weight.describe());
  copies_[weight.autograd_meta().get()] = copy.detach();
}

Tensor live_weight_copy(const Tensor& weight, DType dtype) {
  if (live_copies && weight.defined() && weight.autograd_meta()) {
    const auto it = live_copies->find(weight.autograd_meta().get());
    if (it != live_copies->end() && it->second.dtype() == dtype) return it->second;
  }
  return Tensor();
}

Tensor weight_for(const char* op, const Tensor& weight, DType dtype, Device device) {
  ops_detail::check_defined(op, weight);
  DARK_CHECK(weight.device() == device, op, ": the weight ", weight.describe(), " is not on the activations' device ",
             device.to_string());
  if (weight.dtype() == dtype) return weight;
  if (Tensor copy = live_weight_copy(weight, dtype); copy.defined()) return copy;
  DARK_CHECK(weight.dtype() == DType::f32 && dtype == DType::bf16, op, ": a ", dtype_name(weight.dtype()),
             " weight ", weight.describe(), " cannot multiply ", dtype_name(dtype),
             " activations (only f32 master weights with bf16 activations mix)");
  NoGradGuard no_grad;
  return weight.to(dtype);
}

namespace {
// dy^T x's shape, (out, in), after checking dy (rows, out) and x (rows, in) fit the weight.
Shape weight_grad_shape(const Tensor& dy, const Tensor& x, DType weight_dtype) {
  DARK_CHECK(dy.dim() == 2 && x.dim() == 2 && dy.size(0) == x.size(0) && dy.dtype() == x.dtype(),
             "set_weight_grad: dy ", dy.describe(), " and x ", x.describe(), " must be (rows, out) and (rows, in)");
  DARK_CHECK(weight_dtype == dy.dtype() || (weight_dtype == DType::f32 && dy.dtype() == DType::bf16),
             "set_weight_grad: a ", dtype_name(weight_dtype), " gradient of ", dtype_name(dy.dtype()), " products");
  return {dy.size(1), x.size(1)};
}
}  // namespace

Tensor take_weight_grad_buffer(BackwardContext& g, std::size_t i, const Shape& shape, DType weight_dtype) {
  const DType dtype = grad_dtype(weight_dtype);  // a bf16 weight's gradient is f32 too
  Tensor dw = g.take_zeroed_grad(i);
  DARK_CHECK(!dw.defined() || (dw.shape() == shape && dw.dtype() == dtype), "set_weight_grad: the gradient buffer ",
             dw.describe(), " is not the weight's ", shape_str(shape), " ", dtype_name(dtype));
  return dw;
}

void set_weight_grad(BackwardContext& g, std::size_t i, const Tensor& dy, const Tensor& x, DType weight_dtype) {
  const Shape shape = weight_grad_shape(dy, x, weight_dtype);
  set_weight_grad(g, i, dy, x, weight_dtype, take_weight_grad_buffer(g, i, shape, weight_dtype));
}

void set_weight_grad(BackwardContext& g, std::size_t i, const Tensor& dy, const Tensor& x, DType weight_dtype,
                     Tensor buffer) {
  const Shape shape = weight_grad_shape(dy, x, weight_dtype);
  const bool into_buffer = buffer.defined();
  if (!into_buffer) buffer = Tensor::empty(shape, grad_dtype(weight_dtype), dy.device());
  if (x.size(0) == 0) buffer.fill_(0.0);
  else ops_detail::gemm_into(dy, true, x, false, buffer, 0.0f);
  if (!into_buffer) g.set_input_grad(i, buffer);
}

void set_scaled_weight_grad(BackwardContext& g, std::size_t i, Tensor& dw, const Tensor& scale) {
  Tensor out = g.take_zeroed_grad(i);
  const bool into_buffer = out.defined();
  if (into_buffer) {
    DARK_CHECK(out.shape() == dw.shape() && out.dtype() == dw.dtype(), "set_scaled_weight_grad: the gradient buffer ",
               out.describe(), " is not the weight gradient's ", dw.describe());
  } else {
    out = dw;  // the caller's own: scaled in place
  }
  kernels::binary().get(dw.device().type, dw.dtype())(BinaryOp::mul, dw, core::expand(scale, dw.shape()), out);
  if (!into_buffer) g.set_input_grad(i, dw);
}

}  // namespace dark
