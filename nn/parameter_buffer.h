// Flat parameter and gradient buffers. The trainable parameters of a model are moved
// into one contiguous float32 buffer (each parameter becomes a view of it) and each gets
// a gradient view in a second buffer, bound with autograd's bind_grad, that backward adds
// into in place. Segments start at 64-byte boundaries, in the order the parameters were
// given. Zeroing, the global gradient norm, the finiteness check, optimizer updates,
// all-reduce and checkpoint I/O are then each one call over one buffer; on_grad_ready
// tells, during backward, when an entry's segment of the gradient buffer is final (to
// start all-reducing a bucket of segments while backward goes on).
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace dark::nn {

class ParameterBuffer {
 public:
  struct Entry {
    std::string name;
    Tensor* param;  // the module's member, rebound to a view of values()
    std::int64_t offset = 0, numel = 0;
  };

  // Takes over the given parameters (all float32, one device).
  explicit ParameterBuffer(const std::vector<std::pair<std::string, Tensor*>>& params);

  const std::vector<Entry>& entries() const { return entries_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  std::int64_t numel() const { return values_.numel(); }

  // Adds hook to every entry's parameter with autograd's on_grad_ready (see
  // autograd/grad_binding.h for when it fires: once per backward() for each entry the
  // graph reaches, on the backward thread). The hooks stay for the parameters' lifetime.
  void on_grad_ready(const std::function<void(const Entry&)>& hook);

  // Zeroes the gradient buffer; the gradient views stay bound.
  void zero_grad();
  // sqrt(sum of squared gradients); NaN or inf when any gradient is not finite.
  double grad_norm() const;
  // The sum of squared gradients as a one-element float32 tensor where the gradients live
  // (nothing is read back): grad_norm() without the wait for the device.
  Tensor grad_sq_norm() const;
  void scale_grads(double factor);
  // The slice [offset, offset + numel) of a flat buffer, as a 1-D view.
  static Tensor segment(const Tensor& flat, const Entry& e);

 private:
  std::vector<Entry> entries_;
  Tensor values_, grads_;
};

}  // namespace dark::nn
