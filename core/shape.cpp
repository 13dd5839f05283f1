// Shape rules shared by every op.
#include "core/shape.h"

#include <algorithm>

#include "core/error.h"

namespace dark {

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const Shape& shape, const char* what) {
  std::int64_t product;
  DARK_CHECK(!__builtin_mul_overflow(a, b, &product), "shape ", shape_str(shape), ": ", what,
             " overflows a 64-bit integer (", a, " * ", b, ")");
  return product;
}

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto s : shape) {
    DARK_CHECK(s >= 0, "shape ", shape_str(shape), " has a negative size");
    n = checked_mul(n, s, shape, "element count");
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Sizes of 0 count as 1 here, so a shape with no elements can still overflow.
    if (i > 0) s = checked_mul(s, std::max<std::int64_t>(shape[i], 1), shape, "stride");
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DARK_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_axis(std::int64_t axis, std::size_t ndim, const char* op) {
  const auto n = static_cast<std::int64_t>(ndim);
  DARK_CHECK(axis >= -n && axis < n, op, ": axis ", axis, " out of range for a tensor with ", n,
             " dimensions");
  return static_cast<int>(axis < 0 ? axis + n : axis);
}

}  // namespace dark
