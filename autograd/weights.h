// Mixed precision's weights in the ops that multiply by them (linear, the LM head, the gated
// MLP's down projection). Such an op takes the f32 master weight itself and multiplies by a
// cast copy in the activations' dtype (weight_for), so it differentiates the f32 weight: the
// weight gradient's product writes f32, its accumulator unrounded, straight into the
// parameter's zeroed gradient buffer when the tape offers it (BackwardContext::
// take_zeroed_grad). With a recorded cast between the weight and the op instead, the product
// wrote a bf16 gradient that the tape widened and added to the buffer: the gradient rounded to
// bf16 and three passes over it (write, read it and the buffer, write the buffer) where one
// write does. Megatron-LM's gradient accumulation fusion does the same for the same reasons.
#pragma once
#include <cstddef>
#include <unordered_map>

#include "autograd/tape.h"
#include "core/tensor.h"

namespace dark {

// `weight` as the activations' `dtype`: itself, the copy a live WeightCopies holds for it, or a
// cast copy (not recorded) of an f32 weight for bf16 activations. Any other pair of dtypes or
// devices is an error naming `op`.
Tensor weight_for(const char* op, const Tensor& weight, DType dtype, Device device);
// The copy a live WeightCopies holds for `weight` in `dtype`, else an undefined tensor: for an
// op that would rather cast part of the weight than all of it when there is none (the
// embedding gathers rows, then casts them).
Tensor live_weight_copy(const Tensor& weight, DType dtype);

// Weights cast once per step: while one lives on this thread, weight_for gives each added
// weight (a leaf, by its autograd state) the copy added with it, so a training step casts
// every weight in one kernel (nn::ParameterBuffer::cast_values) rather than one kernel per
// weight and use (micro-batch, recomputation). The weights' values must not change while it
// lives: a training step holds it over its forward and backward passes, not the update.
class WeightCopies {
 public:
  WeightCopies();  // one at a time per thread
  ~WeightCopies();
  WeightCopies(const WeightCopies&) = delete;
  WeightCopies& operator=(const WeightCopies&) = delete;
  // copy: weight's values in another dtype, same shape and device.
  void add(const Tensor& weight, const Tensor& copy);

 private:
  std::unordered_map<const AutogradMeta*, Tensor> copies_;
};

// Sets input i's gradient to dy^T x, for dy (rows, out) and x (rows, in) in the activations'
// dtype with unit column strides: an (out, in) tensor of grad_dtype(weight_dtype) (f32 for
// bf16 products, which write their f32 accumulator), written into the zeroed buffer where the
// tape offers it.
void set_weight_grad(BackwardContext& g, std::size_t i, const Tensor& dy, const Tensor& x, DType weight_dtype);
// The same with the zeroed buffer already taken (take_weight_grad_buffer; undefined: none
// offered), for an op that first looks at all its weights' buffers (linear_group).
void set_weight_grad(BackwardContext& g, std::size_t i, const Tensor& dy, const Tensor& x, DType weight_dtype,
                     Tensor buffer);
// Input i's zeroed gradient buffer where the tape offers it (checked to be an (out, in) =
// `shape` gradient of grad_dtype(weight_dtype)), else an undefined tensor.
Tensor take_weight_grad_buffer(BackwardContext& g, std::size_t i, const Shape& shape, DType weight_dtype);

// Sets input i's gradient to dw * scale (scale a 0-dim tensor of dw's dtype and device) for a
// weight gradient computed before the loss's gradient was known (the LM head's, in its
// forward): written into the zeroed buffer where the tape offers it, else dw scaled in place.
void set_scaled_weight_grad(BackwardContext& g, std::size_t i, Tensor& dw, const Tensor& scale);

}  // namespace dark
