// Module registration and traversal.
#include "nn/module.h"

#include "autograd/ops.h"

namespace dark::nn {

Tensor& Module::register_parameter(const std::string& name, Tensor value) {
  value.set_requires_grad(true);
  params_.emplace_back(name, std::make_unique<Tensor>(std::move(value)));
  return *params_.back().second;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor*>> out;
  const std::string base = prefix.empty() ? "" : prefix + ".";
  for (auto& [name, tensor] : params_) out.emplace_back(base + name, tensor.get());
  for (auto& [name, child] : children_) {
    auto sub = child->named_parameters(base + name);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::int64_t Module::num_parameters() {
  std::int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p->numel();
  return n;
}

void Module::to(Device device) {
  for (auto& [name, p] : params_) {
    if (p->device() == device) continue;
    const bool trainable = p->requires_grad();
    Tensor moved = p->to(device);
    if (trainable) moved.set_requires_grad(true);
    *p = std::move(moved);
  }
  move_state(device);
  for (auto& [name, child] : children_) child->to(device);
}

Device Module::device() {
  const auto params = named_parameters();
  return params.empty() ? Device::cpu() : params.front().second->device();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::set_compute_dtype(DType dtype) {
  DARK_CHECK(is_floating(dtype), "Module::set_compute_dtype: ", dtype_name(dtype), " is not a floating-point dtype");
  compute_dtype_ = dtype;
  for (auto& [name, child] : children_) child->set_compute_dtype(dtype);
}

Tensor Module::to_compute(const Tensor& t) const {
  return !compute_dtype_ || t.dtype() == *compute_dtype_ ? t : to_dtype(t, *compute_dtype_);
}

}  // namespace dark::nn
