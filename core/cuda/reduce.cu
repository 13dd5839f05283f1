// reduce for f32, f64 and bf16: x: (outer, n, inner) contiguous -> out: (outer, inner),
// reducing the middle axis with sum, mean, max, min or logsumexp. Accumulates in
// acc_t<T> (float for f32 and bf16, double for f64). Deterministic: every output has a
// fixed summation tree that depends only on the shape; no atomics.
//   inner == 1, n <= 1024: one warp per output row (warp shuffles)
//   inner == 1, n >  1024: one block per output row (block_reduce)
//   inner >  1          : 2-D blocks, x over 32 adjacent columns (coalesced loads), y over
//                         a strided slice of n; the y partials are combined in fixed order
// logsumexp subtracts the maximum first; a non-finite maximum (all -inf, +inf or NaN) is
// the result itself. max / min propagate NaN; mean of an empty axis is NaN.
#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

// Reduces the contiguous row xr[0..n) with the group; every member gets the result.
template <class T, class Group>
__device__ acc_t<T> reduce_row(ReduceOp op, const T* xr, std::int64_t n, const Group& g) {
  using A = acc_t<T>;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: {
      A acc = A(0);
      for (std::int64_t j = g.rank(); j < n; j += g.size()) acc += load(xr, j);
      acc = g.reduce(acc, SumOp{});
      return op == ReduceOp::mean ? acc / static_cast<A>(n) : acc;
    }
    case ReduceOp::max: {
      A acc = MaxOp::identity<A>();
      for (std::int64_t j = g.rank(); j < n; j += g.size()) acc = MaxOp{}(acc, load(xr, j));
      return g.reduce(acc, MaxOp{});
    }
    case ReduceOp::min: {
      A acc = MinOp::identity<A>();
      for (std::int64_t j = g.rank(); j < n; j += g.size()) acc = MinOp{}(acc, load(xr, j));
      return g.reduce(acc, MinOp{});
    }
    case ReduceOp::logsumexp: {
      A m = MaxOp::identity<A>();
      for (std::int64_t j = g.rank(); j < n; j += g.size()) m = MaxOp{}(m, load(xr, j));
      m = g.reduce(m, MaxOp{});
      if (!finite(m)) return m;
      A s = A(0);
      for (std::int64_t j = g.rank(); j < n; j += g.size()) s += dmath::exp(load(xr, j) - m);
      s = g.reduce(s, SumOp{});
      return m + dmath::log(s);
    }
  }
  return A(0);
}

// One warp per row; blockDim.x is a multiple of 32.
template <class T>
__global__ void reduce_rows_warp_kernel(ReduceOp op, const T* x, T* out, std::int64_t rows,
                                        std::int64_t n) {
  const std::int64_t warps_per_block = blockDim.x / 32;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  for (std::int64_t row = first; row < rows; row += warps_per_block * gridDim.x) {
    const acc_t<T> r = reduce_row(op, x + row * n, n, WarpGroup{});
    if ((threadIdx.x & 31) == 0) store(out, row, r);
  }
}

// One block per row.
template <class T>
__global__ void reduce_rows_block_kernel(ReduceOp op, const T* x, T* out, std::int64_t rows,
                                         std::int64_t n) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const acc_t<T> r = reduce_row(op, x + row * n, n, BlockGroup{});
    if (threadIdx.x == 0) store(out, row, r);
  }
}

constexpr int kColumnTileX = 32;
constexpr int kColumnMaxY = 32;

// Combines the blockDim.y partials of each column in order; all threads get the column's
// result. part: [kColumnMaxY][kColumnTileX].
template <class A, class Op>
__device__ A combine_columns(A v, Op op, A (*part)[kColumnTileX]) {
  __syncthreads();  // earlier readers of part are done
  part[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0) {
    A acc = part[0][threadIdx.x];
    for (unsigned y = 1; y < blockDim.y; ++y) acc = op(acc, part[y][threadIdx.x]);
    part[0][threadIdx.x] = acc;
  }
  __syncthreads();
  return part[0][threadIdx.x];
}

// Tiles of 32 adjacent columns of one outer slice; blockDim = (32, y).
template <class T>
__global__ void reduce_columns_kernel(ReduceOp op, const T* x, T* out, std::int64_t outer,
                                      std::int64_t n, std::int64_t inner) {
  using A = acc_t<T>;
  __shared__ A part[kColumnMaxY][kColumnTileX];
  const std::int64_t tiles_per_outer = (inner + kColumnTileX - 1) / kColumnTileX;
  const std::int64_t tiles = outer * tiles_per_outer;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t o = tile / tiles_per_outer;
    const std::int64_t col = (tile % tiles_per_outer) * kColumnTileX + threadIdx.x;
    const bool valid = col < inner;
    const T* xc = x + o * n * inner + col;  // element j of this column: xc[j * inner]
    A result;
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean: {
        A acc = A(0);
        if (valid)
          for (std::int64_t j = threadIdx.y; j < n; j += blockDim.y) acc += load(xc, j * inner);
        acc = combine_columns(acc, SumOp{}, part);
        result = op == ReduceOp::mean ? acc / static_cast<A>(n) : acc;
        break;
      }
      case ReduceOp::max: {
        A acc = MaxOp::identity<A>();
        if (valid)
          for (std::int64_t j = threadIdx.y; j < n; j += blockDim.y) acc = MaxOp{}(acc, load(xc, j * inner));
        result = combine_columns(acc, MaxOp{}, part);
        break;
      }
      case ReduceOp::min: {
        A acc = MinOp::identity<A>();
        if (valid)
          for (std::int64_t j = threadIdx.y; j < n; j += blockDim.y) acc = MinOp{}(acc, load(xc, j * inner));
        result = combine_columns(acc, MinOp{}, part);
        break;
      }
      case ReduceOp::logsumexp: {
        A m = MaxOp::identity<A>();
        if (valid)
          for (std::int64_t j = threadIdx.y; j < n; j += blockDim.y) m = MaxOp{}(m, load(xc, j * inner));
        m = combine_columns(m, MaxOp{}, part);
        A s = A(0);
        if (valid && finite(m))
          for (std::int64_t j = threadIdx.y; j < n; j += blockDim.y) s += dmath::exp(load(xc, j * inner) - m);
        s = combine_columns(s, SumOp{}, part);
        result = finite(m) ? m + dmath::log(s) : m;
        break;
      }
      default: result = A(0);
    }
    if (valid && threadIdx.y == 0) store(out, o * inner + col, result);
  }
}

template <class T>
void reduce(ReduceOp op, const Tensor& x, Tensor& out, std::int64_t outer, std::int64_t n,
            std::int64_t inner) {
  DARK_CHECK(outer >= 0 && n >= 0 && inner >= 0 && x.numel() == outer * n * inner, "reduce ",
             reduce_op_name(op), ": x ", x.describe(), " is not (", outer, ", ", n, ", ", inner, ")");
  DARK_CHECK(out.numel() == outer * inner, "reduce ", reduce_op_name(op), ": out ", out.describe(),
             " is not (", outer, ", ", inner, ")");
  DARK_CHECK(x.is_contiguous() && out.is_contiguous(), "reduce ", reduce_op_name(op), ": x ",
             x.describe(), " and out ", out.describe(), " must be contiguous");
  check_dtype<T>("reduce", {{"x", &x}, {"out", &out}});
  if (outer * inner == 0) return;
  DeviceGuard guard(out);
  const T* xp = n > 0 ? x.data<T>() : nullptr;
  if (inner == 1) {
    if (n <= 1024) {
      launch(reduce_rows_warp_kernel<T>, {grid_for(outer, kWarpsPerBlock), kThreads}, op, xp, out.data<T>(), outer, n);
    } else {
      launch(reduce_rows_block_kernel<T>, {grid_for(outer, 1), kThreads}, op, xp, out.data<T>(), outer, n);
    }
  } else {
    const dim3 block(kColumnTileX, n >= 128 ? kColumnMaxY : 8);
    const std::int64_t tiles = outer * ((inner + kColumnTileX - 1) / kColumnTileX);
    launch(reduce_columns_kernel<T>, {grid_for(tiles, 1), block}, op, xp, out.data<T>(), outer, n, inner);
  }
  DARK_CUDA_CHECK_LAUNCH();
}

DARK_REGISTER_KERNEL(reduce, cuda, f32, &reduce<float>);
DARK_REGISTER_KERNEL(reduce, cuda, f64, &reduce<double>);
DARK_REGISTER_KERNEL(reduce, cuda, bf16, &reduce<BFloat16>);

}  // namespace
}  // namespace dark::cuda
