// Gradient binding and gradient-ready hooks (see grad_binding.h). Both only set the
// parameter's AutogradMeta; backward() in tape.cpp honours them.
#include "autograd/grad_binding.h"

#include <algorithm>
#include <atomic>

namespace dark {
namespace {

void check_parameter(const char* call, const Tensor& param) {
  DARK_CHECK(param.defined(), call, ": the parameter is undefined");
  DARK_CHECK(param.is_leaf(), call, ": ", param.describe(),
             " is not a leaf (a recorded op computed it); pass the parameter itself");
  DARK_CHECK(param.requires_grad(), call, ": ", param.describe(), " does not require grad");
}

}  // namespace

void bind_grad(Tensor& param, const Tensor& grad_view) {
  check_parameter("bind_grad", param);
  DARK_CHECK(grad_view.defined(), "bind_grad: the gradient view is undefined");
  DARK_CHECK(grad_view.shape() == param.shape(), "bind_grad: gradient view of shape ", shape_str(grad_view.shape()),
             " for a parameter of shape ", shape_str(param.shape()));
  const DType want = grad_dtype(param.dtype());
  DARK_CHECK(grad_view.dtype() == want, "bind_grad: gradient view is ", dtype_name(grad_view.dtype()), "; a ",
             dtype_name(param.dtype()), " parameter accumulates its gradient in ", dtype_name(want));
  DARK_CHECK(grad_view.device() == param.device(), "bind_grad: gradient view on ", grad_view.device().to_string(),
             " for a parameter on ", param.device().to_string());
  // backward's in-place add writes its output densely.
  DARK_CHECK(grad_view.is_contiguous(), "bind_grad: gradient view ", grad_view.describe(),
             " is not contiguous (bind a segment of a flat buffer)");
  AutogradMeta& meta = *param.autograd_meta();
  meta.grad = std::make_shared<Tensor>(grad_view.detach());
  meta.grad_in_buffer = true;
  meta.grad_zeroed = false;  // its values are the caller's
}

void note_grad_zeroed(Tensor& param) {
  check_parameter("note_grad_zeroed", param);
  AutogradMeta& meta = *param.autograd_meta();
  DARK_CHECK(meta.grad_in_buffer, "note_grad_zeroed: ", param.describe(), " has no bound gradient (bind_grad)");
  meta.grad_zeroed = true;
}

GradReadyHandle on_grad_ready(Tensor& param, std::function<void()> hook) {
  check_parameter("on_grad_ready", param);
  DARK_CHECK(hook, "on_grad_ready: the hook is empty");
  static std::atomic<std::uint64_t> next_id{1};
  GradReadyHandle handle;
  handle.meta_ = param.autograd_meta();
  handle.id_ = next_id++;
  param.autograd_meta()->grad_ready_hooks.emplace_back(handle.id_, std::move(hook));
  return handle;
}

void GradReadyHandle::remove() {
  if (const auto meta = meta_.lock())
    std::erase_if(meta->grad_ready_hooks, [&](const auto& h) { return h.first == id_; });
  meta_.reset();
}

}  // namespace dark
