// Iteration over N tensors that share one shape but not strides (broadcast inputs have
// stride 0). The shape is walked row by row (a row = the last axis), rows in parallel;
// fn(row_offsets, row_length, last_axis_strides) handles one row.
#pragma once
#include <array>
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/shape.h"

namespace dark::cpu {

template <std::size_t N, class Fn>
void for_each_row(const Shape& shape, const std::array<const Strides*, N>& strides,
                  std::int64_t grain, Fn&& fn) {
  const std::size_t ndim = shape.size();
  if (ndim == 0) {
    std::array<std::int64_t, N> zero{};
    std::array<std::int64_t, N> unit{};
    fn(zero, std::int64_t{1}, unit);
    return;
  }
  const std::int64_t row_length = shape[ndim - 1];
  const std::int64_t rows = row_length == 0 ? 0 : numel(shape) / row_length;
  std::array<std::int64_t, N> inner{};
  for (std::size_t t = 0; t < N; ++t) inner[t] = (*strides[t])[ndim - 1];
  const std::int64_t rows_per_grain = std::max<std::int64_t>(1, grain / std::max<std::int64_t>(row_length, 1));
  parallel_for(rows, rows_per_grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      std::array<std::int64_t, N> offsets{};
      std::int64_t rest = row;
      for (std::size_t axis = ndim - 1; axis-- > 0;) {
        const std::int64_t index = rest % shape[axis];
        rest /= shape[axis];
        for (std::size_t t = 0; t < N; ++t) offsets[t] += index * (*strides[t])[axis];
      }
      fn(offsets, row_length, inner);
    }
  });
}

}  // namespace dark::cpu
