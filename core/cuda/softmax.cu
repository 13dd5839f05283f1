// softmax_forward / softmax_backward for f32, f64 and bf16 over the last axis of
// x: (rows, n) contiguous; log=true is log_softmax. Stable: the row maximum is subtracted
// before exp (a fully masked row, all -inf, uses 0 instead, as the CPU does). Accumulates in acc_t<T>; deterministic (fixed reduction trees, no atomics).
//   n <= 1024: one warp per row; n > 1024: one block per row.
// Forward:  softmax y = exp(x - m) / s,  log_softmax y = x - m - log(s),
//           m = max(x), s = sum(exp(x - m)).
// Backward: softmax dx = y * (dy - sum(dy * y)),  log_softmax dx = dy - exp(y) * sum(dy).
#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

template <class T, class Group>
__device__ void softmax_forward_row(const T* x, T* y, std::int64_t n, bool log, const Group& g) {
  using A = acc_t<T>;
  A m = MaxOp::identity<A>();
  for (std::int64_t j = g.rank(); j < n; j += g.size()) m = MaxOp{}(m, load(x, j));
  m = g.reduce(m, MaxOp{});
  if (m == MaxOp::identity<A>()) m = A(0);  // fully masked row: avoid -inf - -inf (as the CPU)
  A s = A(0);
  for (std::int64_t j = g.rank(); j < n; j += g.size()) s += dmath::exp(load(x, j) - m);
  s = g.reduce(s, SumOp{});
  if (log) {
    const A shift = m + dmath::log(s);
    for (std::int64_t j = g.rank(); j < n; j += g.size()) store(y, j, load(x, j) - shift);
  } else {
    for (std::int64_t j = g.rank(); j < n; j += g.size()) store(y, j, dmath::exp(load(x, j) - m) / s);
  }
}

template <class T, class Group>
__device__ void softmax_backward_row(const T* y, const T* dy, T* dx, std::int64_t n, bool log,
                                     const Group& g) {
  using A = acc_t<T>;
  A s = A(0);
  if (log) {
    for (std::int64_t j = g.rank(); j < n; j += g.size()) s += load(dy, j);
  } else {
    for (std::int64_t j = g.rank(); j < n; j += g.size()) s += load(dy, j) * load(y, j);
  }
  s = g.reduce(s, SumOp{});
  if (log) {
    for (std::int64_t j = g.rank(); j < n; j += g.size())
      store(dx, j, load(dy, j) - dmath::exp(load(y, j)) * s);
  } else {
    for (std::int64_t j = g.rank(); j < n; j += g.size())
      store(dx, j, load(y, j) * (load(dy, j) - s));
  }
}

// Row loops: warps (blockDim.x / 32 per block) or whole blocks, grid-strided over rows.
template <class T>
__global__ void softmax_forward_warp_kernel(const T* x, T* y, std::int64_t rows, std::int64_t n, bool log) {
  const std::int64_t warps = blockDim.x / 32;
  for (std::int64_t r = blockIdx.x * warps + threadIdx.x / 32; r < rows; r += warps * gridDim.x)
    softmax_forward_row(x + r * n, y + r * n, n, log, WarpGroup{});
}
template <class T>
__global__ void softmax_forward_block_kernel(const T* x, T* y, std::int64_t rows, std::int64_t n, bool log) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    softmax_forward_row(x + r * n, y + r * n, n, log, BlockGroup{});
}
template <class T>
__global__ void softmax_backward_warp_kernel(const T* y, const T* dy, T* dx, std::int64_t rows,
                                             std::int64_t n, bool log) {
  const std::int64_t warps = blockDim.x / 32;
  for (std::int64_t r = blockIdx.x * warps + threadIdx.x / 32; r < rows; r += warps * gridDim.x)
    softmax_backward_row(y + r * n, dy + r * n, dx + r * n, n, log, WarpGroup{});
}
template <class T>
__global__ void softmax_backward_block_kernel(const T* y, const T* dy, T* dx, std::int64_t rows,
                                              std::int64_t n, bool log) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    softmax_backward_row(y + r * n, dy + r * n, dx + r * n, n, log, BlockGroup{});
}

constexpr std::int64_t kWarpRowMax = 1024;  // longest row handled by one warp

// rows and n of a (rows, n) contiguous tensor; n is the last axis (1 for a 0-d tensor).
void rows_and_n(const char* kernel, const Tensor& t, std::int64_t& rows, std::int64_t& n) {
  DARK_CHECK(t.is_contiguous(), kernel, ": ", t.describe(), " is not contiguous");
  n = t.dim() == 0 ? 1 : t.shape().back();
  rows = n == 0 ? 0 : t.numel() / n;
}

template <class T>
void softmax_forward(const Tensor& x, Tensor& y, bool log) {
  DARK_CHECK(x.shape() == y.shape(), "softmax_forward: x ", x.describe(), " and y ", y.describe(),
             " differ in shape");
  check_dtype<T>("softmax_forward", {{"x", &x}, {"y", &y}});
  std::int64_t rows, n;
  rows_and_n("softmax_forward", x, rows, n);
  rows_and_n("softmax_forward", y, rows, n);
  if (rows == 0) return;
  DeviceGuard guard(y);
  if (n <= kWarpRowMax) {
    launch(softmax_forward_warp_kernel<T>, {grid_for(rows, kWarpsPerBlock), kThreads},
        x.data<T>(), y.data<T>(), rows, n, log);
  } else {
    launch(softmax_forward_block_kernel<T>, {grid_for(rows, 1), kThreads}, x.data<T>(), y.data<T>(), rows, n, log);
  }
  DARK_CUDA_CHECK_LAUNCH();
}

template <class T>
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  DARK_CHECK(y.shape() == dx.shape() && dy.shape() == dx.shape(), "softmax_backward: y ",
             y.describe(), ", dy ", dy.describe(), " and dx ", dx.describe(), " differ in shape");
  check_dtype<T>("softmax_backward", {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  std::int64_t rows, n;
  rows_and_n("softmax_backward", y, rows, n);
  rows_and_n("softmax_backward", dy, rows, n);
  rows_and_n("softmax_backward", dx, rows, n);
  if (rows == 0) return;
  DeviceGuard guard(dx);
  if (n <= kWarpRowMax) {
    launch(softmax_backward_warp_kernel<T>, {grid_for(rows, kWarpsPerBlock), kThreads},
        y.data<T>(), dy.data<T>(), dx.data<T>(), rows, n, log);
  } else {
    launch(softmax_backward_block_kernel<T>, {grid_for(rows, 1), kThreads},
        y.data<T>(), dy.data<T>(), dx.data<T>(), rows, n, log);
  }
  DARK_CUDA_CHECK_LAUNCH();
}

DARK_REGISTER_KERNEL(softmax_forward, cuda, f32, &softmax_forward<float>);
DARK_REGISTER_KERNEL(softmax_forward, cuda, f64, &softmax_forward<double>);
DARK_REGISTER_KERNEL(softmax_forward, cuda, bf16, &softmax_forward<BFloat16>);
DARK_REGISTER_KERNEL(softmax_backward, cuda, f32, &softmax_backward<float>);
DARK_REGISTER_KERNEL(softmax_backward, cuda, f64, &softmax_backward<double>);
DARK_REGISTER_KERNEL(softmax_backward, cuda, bf16, &softmax_backward<BFloat16>);

}  // namespace
}  // namespace dark::cuda
