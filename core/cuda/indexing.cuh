// Offsets of strided operands from the linear index of a contiguous output. The host side
// drops size-1 axes and merges axes that are contiguous in every operand, so common
// layouts collapse to rank 1 (the contiguous fast path) and deep views fit kMaxRank.
//   shape: (d0, ..., d{rank-1}); operand k element at linear i sits at
//   sum_d index_d(i) * strides[k][d].
#pragma once
#include <array>
#include <cstdint>

#include "core/cuda/runtime.cuh"
#include "core/error.h"
#include "core/shape.h"

namespace dark::cuda {

inline constexpr int kMaxRank = 8;

template <int N>
struct StridedIndexer {
  int rank = 0;
  std::int64_t sizes[kMaxRank] = {};
  std::int64_t strides[N][kMaxRank] = {};

  // True when every operand's offset equals the linear index.
  bool contiguous() const {
    if (rank == 0) return true;
    if (rank > 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[k][0] != 1) return false;
    return true;
  }

  __device__ __forceinline__ void offsets(std::int64_t linear, std::int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const std::int64_t size = sizes[d];
      const std::int64_t i = linear % size;
      linear /= size;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }
};

// Builds the indexer of N operands sharing `shape`; `kernel` names the caller in errors.
template <int N>
StridedIndexer<N> make_indexer(const char* kernel, const Shape& shape,
                               const std::array<const Strides*, N>& operand_strides) {
  for (int k = 0; k < N; ++k)
    DARK_CHECK(operand_strides[k]->size() == shape.size(), kernel, ": operand ", k, " has ",
               operand_strides[k]->size(), " strides for shape ", shape_str(shape));
  // Collapse: skip size-1 axes, merge an axis into the previous kept one when contiguous
  // with it in every operand.
  std::int64_t sizes[64];
  std::int64_t strides[N][64];
  int rank = 0;
  const int ndim = static_cast<int>(shape.size());
  DARK_CHECK(ndim <= 64, kernel, ": ", ndim, " axes are more than 64");
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    bool mergeable = rank > 0;
    for (int k = 0; k < N && mergeable; ++k)
      mergeable = strides[k][rank - 1] == (*operand_strides[k])[d] * shape[d];
    if (mergeable) {
      sizes[rank - 1] *= shape[d];
      for (int k = 0; k < N; ++k) strides[k][rank - 1] = (*operand_strides[k])[d];
    } else {
      sizes[rank] = shape[d];
      for (int k = 0; k < N; ++k) strides[k][rank] = (*operand_strides[k])[d];
      ++rank;
    }
  }
  DARK_CHECK(rank <= kMaxRank, kernel, ": shape ", shape_str(shape), " needs ", rank,
             " strided axes after merging, more than the CUDA limit of ", kMaxRank);
  StridedIndexer<N> ix;
  ix.rank = rank;
  for (int d = 0; d < rank; ++d) {
    ix.sizes[d] = sizes[d];
    for (int k = 0; k < N; ++k) ix.strides[k][d] = strides[k][d];
  }
  return ix;
}

}  // namespace dark::cuda
