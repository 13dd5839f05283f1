// Tensor creation, conversion, raw views and printing.
#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "core/backend.h"
#include "core/kernels.h"

namespace dark {

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, std::int64_t offset,
               DType dtype)
    : storage_(std::move(storage)), shape_(std::move(shape)), strides_(std::move(strides)),
      offset_(offset), dtype_(dtype) {}

// ---------------------------------------------------------------- creation
namespace {
// Bytes of a contiguous tensor; an overflow is an error naming dtype and shape, before any
// allocation is attempted.
std::size_t storage_bytes(const Shape& shape, DType dtype) {
  const std::int64_t n = dark::numel(shape);
  std::int64_t bytes;
  DARK_CHECK(!__builtin_mul_overflow(n, static_cast<std::int64_t>(dtype_size(dtype)), &bytes), "empty: ",
             dtype_name(dtype), shape_str(shape), " needs ", n, " elements of ", dtype_size(dtype),
             " bytes each: the byte count overflows a 64-bit integer");
  return static_cast<std::size_t>(bytes);
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (auto s : shape) DARK_CHECK(s >= 0, "empty: negative size in shape ", shape_str(shape));
  Strides strides = contiguous_strides(shape);
  auto storage = std::make_shared<Storage>(storage_bytes(shape, dtype), device);
  return Tensor(std::move(storage), shape, std::move(strides), 0, dtype);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor Tensor::scalar(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor Tensor::arange(std::int64_t n, DType dtype, Device device) {
  std::vector<double> values(n);
  std::iota(values.begin(), values.end(), 0.0);
  return from_vector(values, {n}).to(dtype).to(device);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  DARK_CHECK(static_cast<std::int64_t>(values.size()) == dark::numel(shape), "from_vector: ",
             values.size(), " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>::value, Device::cpu());
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t.to(device);
}

Tensor Tensor::randn(const Shape& shape, std::uint64_t seed, std::uint64_t stream, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  kernels::fill_normal().get(device.type, dtype)(t, seed, stream, 0, 0.0, 1.0);
  return t;
}

Tensor Tensor::rand(const Shape& shape, std::uint64_t seed, std::uint64_t stream, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  kernels::fill_uniform().get(device.type, dtype)(t, seed, stream, 0, 0.0, 1.0);
  return t;
}

// ---------------------------------------------------------------- metadata
std::int64_t Tensor::size(std::int64_t axis) const { return shape_[normalize_axis(axis, dim(), "size")]; }
std::int64_t Tensor::stride(std::int64_t axis) const {
  return strides_[normalize_axis(axis, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return str(dtype_name(dtype_), shape_str(shape_), " ", device().to_string());
}

void* Tensor::raw_data() const {
  DARK_CHECK(defined(), "raw_data(): tensor is undefined");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  DARK_CHECK(dtype_of<T>::value == dtype_, "to_vector<", dtype_name(dtype_of<T>::value),
             ">(): tensor holds ", dtype_name(dtype_));
  const Tensor host = contiguous().to(Device::cpu());
  std::vector<T> out(numel());
  if (!out.empty()) std::memcpy(out.data(), host.raw_data(), out.size() * sizeof(T));
  return out;
}

double Tensor::item() const {
  DARK_CHECK(numel() == 1, "item(): tensor ", describe(), " has ", numel(), " elements, not 1");
  return to(DType::f64).to_vector<double>()[0];
}

// ---------------------------------------------------------------- conversion
Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  DARK_CHECK(src.shape() == shape_, "copy_: source ", src.describe(), " into ", describe());
  // No silent conversion: a dtype mismatch is almost always a bug at the call site.
  DARK_CHECK(src.dtype() == dtype_, "copy_: source ", dtype_name(src.dtype()), shape_str(src.shape()),
             " into destination ", dtype_name(dtype_), shape_str(shape_),
             ": dtypes differ; convert explicitly with .to(dtype)");
  if (src.device() == device()) {
    kernels::strided_copy().get(device().type, dtype_)(src, *this);
    return;
  }
  copy_(src.to(device()));
}

void Tensor::fill_(double value) {
  DARK_CHECK(is_contiguous(), "fill_: tensor ", describe(), " is not contiguous");
  kernels::fill().get(device().type, dtype_)(*this, value);
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  const Tensor src = contiguous();
  Tensor out = empty(shape_, dtype_, target);
  const DeviceType backend = target.is_cpu() ? device().type : target.type;
  backend_for(backend).copy(out.raw_data(), target, src.raw_data(), device(), numel() * dtype_size(dtype_));
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype_) return *this;
  const Tensor src = contiguous();
  Tensor out = empty(shape_, target, device());
  kernels::cast().get(device().type, dtype_)(src, out);
  return out;
}

// ---------------------------------------------------------------- autograd state
Tensor& Tensor::set_requires_grad(bool requires_grad) {
  DARK_CHECK(!requires_grad || is_floating(dtype_), "set_requires_grad: ", describe(),
             " is not a floating-point tensor");
  DARK_CHECK(is_leaf(), "set_requires_grad: only leaf tensors can change requires_grad; use detach()");
  if (!autograd_) autograd_ = std::make_shared<AutogradMeta>();
  autograd_->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  return autograd_ && autograd_->grad ? *autograd_->grad : Tensor();
}

void Tensor::zero_grad() {
  if (!autograd_) return;
  if (autograd_->grad_in_buffer) {
    autograd_->grad->fill_(0.0);
    autograd_->grad_zeroed = true;
  } else {
    autograd_->grad.reset();
  }
}

Tensor Tensor::detach() const { return Tensor(storage_, shape_, strides_, offset_, dtype_); }

// ---------------------------------------------------------------- printing
namespace {
void print_recursive(std::ostream& os, const std::vector<double>& v, const Shape& shape,
                     std::size_t axis, std::int64_t base, int max_per_dim) {
  const Strides strides = contiguous_strides(shape);
  if (axis == shape.size()) {
    os << v[base];
    return;
  }
  os << "[";
  const std::int64_t n = shape[axis];
  for (std::int64_t i = 0; i < n; ++i) {
    if (n > max_per_dim && i == max_per_dim / 2) {
      os << "...";
      i = n - max_per_dim / 2 - 1;
      if (axis + 1 < shape.size()) os << ",\n" << std::string(axis + 1, ' ');
      else os << ", ";
      continue;
    }
    print_recursive(os, v, shape, axis + 1, base + i * strides[axis], max_per_dim);
    if (i + 1 < n) {
      if (axis + 1 < shape.size()) os << ",\n" << std::string(axis + 1, ' ');
      else os << ", ";
    }
  }
  os << "]";
}
}  // namespace

std::string Tensor::to_string(int max_per_dim) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << describe() << (requires_grad() ? ", requires_grad" : "") << ")\n";
  os << std::setprecision(6);
  print_recursive(os, to(DType::f64).to_vector<double>(), shape_, 0, 0, std::max(2, max_per_dim));
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

// ---------------------------------------------------------------- raw views
namespace core {

Tensor reshape(const Tensor& t, Shape shape) {
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DARK_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known = checked_mul(known, shape[i], shape, "element count");
    }
  }
  if (infer >= 0) {
    DARK_CHECK(known > 0 && t.numel() % known == 0, "reshape: cannot reshape ", t.describe(), " to ",
               shape_str(shape));
    shape[infer] = t.numel() / known;
  }
  DARK_CHECK(numel(shape) == t.numel(), "reshape: cannot reshape ", t.describe(), " to ", shape_str(shape));
  const Tensor src = t.is_contiguous() ? t : t.contiguous();
  return Tensor(src.storage(), shape, contiguous_strides(shape), src.offset(), src.dtype());
}

Tensor permute(const Tensor& t, const std::vector<int>& order) {
  DARK_CHECK(order.size() == t.dim(), "permute: order of ", order.size(), " axes for ", t.describe());
  std::vector<bool> seen(order.size(), false);
  Shape shape(order.size());
  Strides strides(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int a = normalize_axis(order[i], t.dim(), "permute");
    DARK_CHECK(!seen[a], "permute: axis ", a, " repeated");
    seen[a] = true;
    shape[i] = t.shape()[a];
    strides[i] = t.strides()[a];
  }
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

Tensor transpose(const Tensor& t, int axis0, int axis1) {
  std::vector<int> order(t.dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_axis(axis0, t.dim(), "transpose")], order[normalize_axis(axis1, t.dim(), "transpose")]);
  return permute(t, order);
}

Tensor slice(const Tensor& t, int axis, std::int64_t start, std::int64_t end, std::int64_t step) {
  const int a = normalize_axis(axis, t.dim(), "slice");
  const std::int64_t n = t.shape()[a];
  DARK_CHECK(step > 0, "slice: step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<std::int64_t>(start, 0, n);
  end = std::clamp<std::int64_t>(end, start, n);
  Shape shape = t.shape();
  Strides strides = t.strides();
  shape[a] = (end - start + step - 1) / step;
  strides[a] *= step;
  return Tensor(t.storage(), shape, strides, t.offset() + start * t.strides()[a], t.dtype());
}

Tensor expand(const Tensor& t, const Shape& shape) {
  DARK_CHECK(shape.size() >= t.dim(), "expand: cannot expand ", t.describe(), " to ", shape_str(shape));
  const std::size_t lead = shape.size() - t.dim();
  Strides strides(shape.size(), 0);
  for (std::size_t i = 0; i < t.dim(); ++i) {
    const std::int64_t have = t.shape()[i], want = shape[lead + i];
    DARK_CHECK(have == want || have == 1, "expand: cannot expand ", t.describe(), " to ", shape_str(shape));
    strides[lead + i] = have == want ? t.strides()[i] : 0;
  }
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

Tensor unsqueeze(const Tensor& t, int axis) {
  const int a = normalize_axis(axis, t.dim() + 1, "unsqueeze");
  Shape shape = t.shape();
  Strides strides = t.strides();
  const std::int64_t stride = a < static_cast<int>(t.dim()) ? strides[a] * shape[a] : 1;
  shape.insert(shape.begin() + a, 1);
  strides.insert(strides.begin() + a, stride);
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

Tensor squeeze(const Tensor& t, int axis) {
  const int a = normalize_axis(axis, t.dim(), "squeeze");
  DARK_CHECK(t.shape()[a] == 1, "squeeze: axis ", a, " of ", t.describe(), " has size ", t.shape()[a]);
  Shape shape = t.shape();
  Strides strides = t.strides();
  shape.erase(shape.begin() + a);
  strides.erase(strides.begin() + a);
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

}  // namespace core

#define DARK_INSTANTIATE(T)                                                                  \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&, Device);      \
  template std::vector<T> Tensor::to_vector<T>() const;
DARK_INSTANTIATE(float)
DARK_INSTANTIATE(double)
DARK_INSTANTIATE(BFloat16)
DARK_INSTANTIATE(std::int32_t)
DARK_INSTANTIATE(std::int64_t)
#undef DARK_INSTANTIATE

}  // namespace dark
