// Tensor: a strided view (shape, strides, offset, dtype) of shared device Storage, plus
// an optional AutogradMeta. Copying a Tensor is cheap and shares both.
//
// Everything here is raw and untracked: the view functions in namespace dark::core change
// only metadata and never record on the tape. Differentiable ops (including differentiable
// views) live in autograd/ops.h and are what models use.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/bfloat16.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace dark {

class Tensor;

// Per-tensor autograd state. Shared between copies of one Tensor handle; created by
// set_requires_grad on leaves and by the tape for recorded op outputs.
struct AutogradMeta {
  bool requires_grad = false;
  // Tape sequence number of the op that produced this tensor; -1 for leaves.
  std::int64_t producer = -1;
  // Accumulated gradient (fp32 for bf16 tensors). For non-leaves it only lives during
  // backward, until the producing op has consumed it.
  std::shared_ptr<Tensor> grad;
  // The fields below belong to autograd (autograd/grad_binding.h); only autograd/ and
  // Tensor::zero_grad read them.
  // Set by bind_grad when `grad` is a view into a flat gradient buffer: backward then adds
  // into it in place and zero_grad() fills it with zeros instead of dropping it.
  bool grad_in_buffer = false;
  // Set when that buffer view was just zeroed (zero_grad) and backward has added nothing to it
  // since: the op that first contributes may then write its gradient there directly rather
  // than into a temporary that is added after (BackwardContext::take_zeroed_grad).
  bool grad_zeroed = false;
  // on_grad_ready hooks of a leaf, each with the id its handle removes it by.
  std::vector<std::pair<std::uint64_t, std::function<void()>>> grad_ready_hooks;
};

// C++ type <-> DType.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() is false

  // ---- creation (contiguous) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::f32, Device device = Device::cpu());
  // 0, 1, ..., n-1.
  static Tensor arange(std::int64_t n, DType dtype = DType::f32, Device device = Device::cpu());
  // Copies host values (numel must equal the shape's) to a new tensor.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu());
  // Counter-based random fills: the same (seed, stream) gives the same numbers on every
  // device. See core/philox.h.
  static Tensor randn(const Shape& shape, std::uint64_t seed, std::uint64_t stream = 0,
                      DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor rand(const Shape& shape, std::uint64_t seed, std::uint64_t stream = 0,
                     DType dtype = DType::f32, Device device = Device::cpu());

  // ---- metadata ----
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  std::int64_t size(std::int64_t axis) const;
  std::int64_t stride(std::int64_t axis) const;
  std::size_t dim() const { return shape_.size(); }
  std::int64_t numel() const { return dark::numel(shape_); }
  std::int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_contiguous() const;
  // Human-readable description used in error messages: "f32[2, 3] cpu".
  std::string describe() const;

  // ---- data access ----
  // Pointer to the first element (storage + offset). T must match dtype().
  template <class T> T* data() const;
  void* raw_data() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }
  // Element copy to host (any layout, any device); T must match dtype().
  template <class T> std::vector<T> to_vector() const;
  // The only element of a one-element tensor, converted to double.
  double item() const;

  // ---- conversion (always returns a new contiguous tensor unless already suitable) ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  // Copies src's values into this tensor's elements (any strides, any devices). Shapes and
  // dtypes must match: nothing converts silently; use src.to(dtype()) to convert.
  void copy_(const Tensor& src);
  void fill_(double value);

  // ---- autograd state (the tape itself lives in autograd/) ----
  bool requires_grad() const { return autograd_ && autograd_->requires_grad; }
  // Marks a leaf as trainable. Throws on non-floating dtypes.
  Tensor& set_requires_grad(bool requires_grad = true);
  bool is_leaf() const { return !autograd_ || autograd_->producer < 0; }
  // The accumulated gradient; undefined before the first backward reaching this tensor.
  Tensor grad() const;
  void zero_grad();
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_; }
  std::shared_ptr<AutogradMeta>& mutable_autograd_meta() { return autograd_; }
  // The same data without autograd state: nothing done to the result is recorded.
  Tensor detach() const;

  std::string to_string(int max_per_dim = 6) const;

  // Low-level constructor for views: shares storage, sets metadata, no autograd state.
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, std::int64_t offset,
         DType dtype);

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  std::int64_t offset_ = 0;
  DType dtype_ = DType::f32;
  std::shared_ptr<AutogradMeta> autograd_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- raw (untracked) views: metadata only, no copy unless stated ----
namespace core {
// Reshape needs a layout the new shape can view; otherwise it copies (like torch.reshape).
// One entry may be -1.
Tensor reshape(const Tensor& t, Shape shape);
Tensor permute(const Tensor& t, const std::vector<int>& order);
Tensor transpose(const Tensor& t, int axis0, int axis1);
// Elements start, start+step, ... < end along axis (negative start/end count from the end).
Tensor slice(const Tensor& t, int axis, std::int64_t start, std::int64_t end, std::int64_t step = 1);
// Broadcasts size-1 axes (and new leading axes) to `shape` with stride 0.
Tensor expand(const Tensor& t, const Shape& shape);
Tensor unsqueeze(const Tensor& t, int axis);
Tensor squeeze(const Tensor& t, int axis);
}  // namespace core

// ---- template definitions ----
template <class T>
T* Tensor::data() const {
  DARK_CHECK(defined(), "data(): tensor is undefined");
  DARK_CHECK(dtype_of<T>::value == dtype_, "data<", dtype_name(dtype_of<T>::value),
             ">(): tensor holds ", dtype_name(dtype_));
  return static_cast<T*>(storage_->data()) + offset_;
}

}  // namespace dark
