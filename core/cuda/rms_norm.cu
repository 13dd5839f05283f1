// RMSNorm for f32, f64 and bf16 over the last axis of x: (R, D) (core/kernels.h):
//   forward   y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), one warp per row (with the
//             residual add fused in: of x + residual, also written out);
//   backward  dx = rstd w dy - x rstd^3 mean(w dy x) (+ the fused add's output gradient),
//             one warp per row; and
//             dweight = sum over rows of dy x rstd, deterministically in two passes: partial
//             sums over fixed chunks of kRowsPerPart rows (blocks of 32 columns x 8 row
//             lanes, combined in order), then each column's partials summed in chunk order.
// Statistics (rstd) in acc_t<T>: float for f32 and bf16, double for f64.
#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

constexpr std::int64_t kRowsPerPart = 256;
constexpr int kColumnLanes = 8;

// residual (and sum) null: the plain norm of x. Otherwise of s = x + residual, rounded to T
// as the add op rounds it, written to sum in the first loop and read back in the second by
// the lane that wrote it (from L1 by then).
template <class T>
__global__ void rms_norm_forward_kernel(const T* x, const T* w, T* y, acc_t<T>* rstd, std::int64_t rows,
                                        std::int64_t d, acc_t<T> eps, const T* residual, T* sum) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock) {
    const T* xr = x + r * d;
    A ss = A(0);
    for (std::int64_t j = lane; j < d; j += 32) {
      A v = load(xr, j);
      if (residual) {
        const T s = convert<T>(v + load(residual + r * d, j));
        sum[r * d + j] = s;
        v = convert<A>(s);
      }
      ss += v * v;
    }
    ss = WarpGroup{}.reduce(ss, SumOp{});
    const A rs = A(1) / dmath::sqrt(ss / static_cast<A>(d) + eps);
    if (lane == 0) rstd[r] = rs;
    T* yr = y + r * d;
    const T* normed = residual ? sum + r * d : xr;
    for (std::int64_t j = lane; j < d; j += 32) store(yr, j, load(normed, j) * rs * load(w, j));
  }
}

template <class T>
__global__ void rms_norm_dx_kernel(const T* x, const T* w, const acc_t<T>* rstd, const T* dy, T* dx, std::int64_t rows,
                                   std::int64_t d, const T* dsum) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const A inv_d = A(1) / static_cast<A>(d);
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    A dot = A(0);
    for (std::int64_t j = lane; j < d; j += 32) dot += load(dyr, j) * load(w, j) * load(xr, j);
    dot = WarpGroup{}.reduce(dot, SumOp{});
    const A rs = rstd[r];
    const A c = rs * rs * rs * dot * inv_d;
    T* dxr = dx + r * d;
    for (std::int64_t j = lane; j < d; j += 32) {
      const A v = rs * load(w, j) * load(dyr, j) - load(xr, j) * c;
      if (dsum) store(dxr, j, convert<A>(convert<T>(v)) + load(dsum + r * d, j));  // rounded, then summed
      else store(dxr, j, v);
    }
  }
}

// partial[p, j] = sum over rows [p kRowsPerPart, ...) of dy x rstd; blockDim (32, kColumnLanes).
template <class T>
__global__ void rms_norm_dweight_partial_kernel(const T* x, const acc_t<T>* rstd, const T* dy, acc_t<T>* partial,
                                                std::int64_t rows, std::int64_t d) {
  using A = acc_t<T>;
  __shared__ A lanes[kColumnLanes][32];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const std::int64_t p = blockIdx.y, r0 = p * kRowsPerPart, r1 = r0 + kRowsPerPart < rows ? r0 + kRowsPerPart : rows;
  A acc = A(0);
  if (col < d)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kColumnLanes) acc += load(dy, r * d + col) * load(x, r * d + col) * rstd[r];
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    A sum = lanes[0][threadIdx.x];
    for (int y = 1; y < kColumnLanes; ++y) sum += lanes[y][threadIdx.x];
    partial[p * d + col] = sum;
  }
}

// dweight in the activations' dtype T, or unrounded in acc_t<T> (an f32 master weight of
// bf16 activations).
template <class T, class Out>
__global__ void rms_norm_dweight_sum_kernel(const acc_t<T>* partial, Out* dweight, std::int64_t parts, std::int64_t d) {
  for (std::int64_t j = global_thread(); j < d; j += grid_threads()) {
    acc_t<T> sum = acc_t<T>(0);
    for (std::int64_t p = 0; p < parts; ++p) sum += partial[p * d + j];
    store(dweight, j, sum);
  }
}

template <class T>
void rms_norm_forward(const Tensor& x, const Tensor& weight, Tensor& y, Tensor& rstd, double eps,
                      const Tensor& residual, Tensor& sum) {
  check_dtype<T>("rms_norm_forward", {{"x", &x}, {"weight", &weight}, {"y", &y}});
  const std::int64_t d = x.shape().back(), rows = rstd.numel();
  if (rows == 0 || d == 0) return;
  DeviceGuard guard(x);
  launch(rms_norm_forward_kernel<T>, {grid_for(rows, kWarpsPerBlock), kThreads}, x.data<T>(), weight.data<T>(),
         y.data<T>(), rstd.data<acc_t<T>>(), rows, d, static_cast<acc_t<T>>(eps),
         residual.defined() ? residual.data<T>() : nullptr, residual.defined() ? sum.data<T>() : nullptr);
}

template <class T>
void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                       Tensor& dweight, const Tensor& dsum) {
  check_dtype<T>("rms_norm_backward", {{"x", &x}, {"weight", &weight}, {"dy", &dy}});
  const std::int64_t d = x.shape().back(), rows = rstd.numel();
  if (d == 0) return;
  DeviceGuard guard(x);
  if (dx.defined() && rows > 0)
    launch(rms_norm_dx_kernel<T>, {grid_for(rows, kWarpsPerBlock), kThreads}, x.data<T>(), weight.data<T>(),
           rstd.data<acc_t<T>>(), dy.data<T>(), dx.data<T>(), rows, d, dsum.defined() ? dsum.data<T>() : nullptr);
  if (!dweight.defined()) return;
  const std::int64_t parts = rows == 0 ? 1 : (rows + kRowsPerPart - 1) / kRowsPerPart;
  DARK_CHECK(parts <= 65535, "rms_norm_backward: ", rows, " rows need ", parts, " partial sums, more than 65535");
  Tensor partial = Tensor::zeros({parts, d}, dtype_of<acc_t<T>>::value, x.device());
  if (rows > 0)
    launch(rms_norm_dweight_partial_kernel<T>,
           {dim3(static_cast<unsigned>((d + 31) / 32), static_cast<unsigned>(parts)), dim3(32, kColumnLanes)}, x.data<T>(),
           rstd.data<acc_t<T>>(), dy.data<T>(), partial.data<acc_t<T>>(), rows, d);
  if (dweight.dtype() == x.dtype())
    launch(rms_norm_dweight_sum_kernel<T, T>, {grid_for(d), kThreads}, partial.data<acc_t<T>>(), dweight.data<T>(),
           parts, d);
  else
    launch(rms_norm_dweight_sum_kernel<T, acc_t<T>>, {grid_for(d), kThreads}, partial.data<acc_t<T>>(),
           dweight.data<acc_t<T>>(), parts, d);
}

DARK_REGISTER_KERNEL(rms_norm_forward, cuda, f32, &rms_norm_forward<float>);
DARK_REGISTER_KERNEL(rms_norm_forward, cuda, f64, &rms_norm_forward<double>);
DARK_REGISTER_KERNEL(rms_norm_forward, cuda, bf16, &rms_norm_forward<BFloat16>);
DARK_REGISTER_KERNEL(rms_norm_backward, cuda, f32, &rms_norm_backward<float>);
DARK_REGISTER_KERNEL(rms_norm_backward, cuda, f64, &rms_norm_backward<double>);
DARK_REGISTER_KERNEL(rms_norm_backward, cuda, bf16, &rms_norm_backward<BFloat16>);

}  // namespace
}  // namespace dark::cuda
