// Shapes and strides (in elements) plus the rules shared by every op: numel,
// contiguous strides, broadcasting, axis normalisation, printing as [2, 3]. Size arithmetic
// is overflow-checked: a shape whose element count does not fit int64 is an error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dark {

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

// Both throw naming the shape when a size is negative (numel) or the product overflows
// int64, so no size arithmetic downstream can wrap around.
std::int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// a * b, throwing naming the shape and `what` ("element count") when it overflows int64.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const Shape& shape, const char* what);
std::string shape_str(const Shape& shape);

// Numpy broadcasting of two shapes; throws naming op and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Maps a possibly negative axis into [0, ndim); throws naming the op otherwise.
int normalize_axis(std::int64_t axis, std::size_t ndim, const char* op);

}  // namespace dark
