// Shapes and strides (in elements) plus the rules shared by every op: numel,
// contiguous strides, broadcasting, axis normalisation, printing as [2, 3].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dark {

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);

// Numpy broadcasting of two shapes; throws naming op and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Maps a possibly negative axis into [0, ndim); throws naming the op otherwise.
int normalize_axis(std::int64_t axis, std::size_t ndim, const char* op);

}  // namespace dark
