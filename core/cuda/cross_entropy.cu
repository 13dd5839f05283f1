// Fused cross entropy for f32, f64 and bf16 over rows of logits: (N, V) with i32 / i64
// targets (core/kernels.h), as the CPU computes it (core/cpu/cross_entropy.cpp):
//   forward   one block per row: lse = max + log(sum exp(x - max)) in acc_t<T>, the row's loss
//             lse - x[target] (0 for ignore_index rows); then one block sums the row losses
//             and the counted rows in float64 in a fixed tree: loss = total / count (0 when
//             nothing is counted). A target outside [0, V) that is not ignore_index is the
//             CPU's error, checked after the kernels (one read-back of the first bad row).
//   backward  count of counted rows and scale = dloss / count on the device (no read-back),
//             then one block per row: dx = exp(x - lse) scale, minus scale at the target.
// Deterministic: every sum has a fixed tree that depends only on the shape; no atomics in sums.
#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/device_check.cuh"
#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kSumThreads = 1024;

// The stable logsumexp of a row, computed by the whole block (every thread gets it).
template <class T>
__device__ acc_t<T> block_logsumexp(const T* xr, std::int64_t classes) {
  using A = acc_t<T>;
  const BlockGroup g;
  A m = MaxOp::identity<A>();
  for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) m = MaxOp{}(m, load(xr, j));
  m = g.reduce(m, MaxOp{});
  if (!finite(m)) return m;
  A s = A(0);
  for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += dmath::exp(load(xr, j) - m);
  s = g.reduce(s, SumOp{});
  return m + dmath::log(s);
}

template <class T>
__global__ void row_logsumexp_kernel(const T* x, T* lse, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const acc_t<T> v = block_logsumexp(x + r * cols, cols);
    if (threadIdx.x == 0) store(lse, r, v);
  }
}

template <class T>
void row_logsumexp(const Tensor& x, Tensor& lse) {
  check_dtype<T>("row_logsumexp", {{"x", &x}, {"lse", &lse}});
  const std::int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (rows == 0) return;
  DeviceGuard guard(x);
  launch(row_logsumexp_kernel<T>, {grid_for(rows, 1), kRowThreads}, x.data<T>(), lse.data<T>(), rows, cols);
}

template <class T, class I>
__global__ void cross_entropy_rows_kernel(const T* x, const I* targets, acc_t<T>* lse, double* row_loss,
                                          double* counted, std::int64_t rows, std::int64_t classes,
                                          std::int64_t ignore_index, unsigned long long* bad) {
  using A = acc_t<T>;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t t = static_cast<std::int64_t>(targets[r]);
    if (t == ignore_index || t < 0 || t >= classes) {
      if (threadIdx.x == 0) {
        if (t != ignore_index) flag_bad(bad, r);
        lse[r] = A(0);
        row_loss[r] = 0.0;
        counted[r] = 0.0;
      }
      continue;  // uniform across the block: no barrier is skipped by part of it
    }
    const T* xr = x + r * classes;
    const A result = block_logsumexp(xr, classes);
    if (threadIdx.x == 0) {
      lse[r] = result;
      row_loss[r] = static_cast<double>(static_cast<T>(result - load(xr, t)));  // rounded as the CPU's T
      counted[r] = 1.0;
    }
  }
}

// loss[0] = sum(row_loss) / sum(counted), or 0; one block.
template <class T>
__global__ void cross_entropy_mean_kernel(const double* row_loss, const double* counted, T* loss, std::int64_t rows) {
  double total = 0.0, count = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) total += row_loss[r], count += counted[r];
  total = block_reduce(total, SumOp{});
  count = block_reduce(count, SumOp{});
  if (threadIdx.x == 0) store(loss, 0, static_cast<acc_t<T>>(count > 0.0 ? total / count : 0.0));
}

// scale[0] = dloss / count (0 when nothing is counted), in float64; one block.
template <class T, class I>
__global__ void cross_entropy_scale_kernel(const I* targets, const T* dloss, double* scale, std::int64_t rows,
                                           std::int64_t classes, std::int64_t ignore_index) {
  double count = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const std::int64_t t = static_cast<std::int64_t>(targets[r]);
    count += (t != ignore_index && t >= 0 && t < classes) ? 1.0 : 0.0;
  }
  count = block_reduce(count, SumOp{});
  if (threadIdx.x == 0) scale[0] = count > 0.0 ? static_cast<double>(load(dloss, 0)) / count : 0.0;
}

template <class T, class I>
__global__ void cross_entropy_backward_kernel(const T* x, const I* targets, const acc_t<T>* lse, const double* scale_in,
                                              T* dx, std::int64_t rows, std::int64_t classes,
                                              std::int64_t ignore_index) {
  using A = acc_t<T>;
  const A scale = static_cast<A>(scale_in[0]);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t t = static_cast<std::int64_t>(targets[r]);
    const bool counted = t != ignore_index && t >= 0 && t < classes;
    const T* xr = x + r * classes;
    T* dxr = dx + r * classes;
    const A l = lse[r];
    for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      A v = A(0);
      if (counted) {
        v = dmath::exp(load(xr, j) - l) * scale;
        if (j == t) v -= scale;
      }
      store(dxr, j, v);
    }
  }
}

// One row per block iteration, threads across its columns: no per-element division to find
// the row (64-bit, dozens of instructions per element). O is T, or bf16 for f32 T.
template <class T, class O, class I>
__global__ void cross_entropy_chunk_backward_kernel(const T* x, O* dx, const T* lse, const T* scale, const I* targets,
                                                    std::int64_t rows, std::int64_t cols, std::int64_t v0) {
  using A = acc_t<T>;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const A s = load(scale, r), l = load(lse, r);
    const std::int64_t target = static_cast<std::int64_t>(targets[r]) - v0;
    const T* xr = x + r * cols;
    O* dr = dx + r * cols;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      A v = dmath::exp(load(xr, j) - l) * s;
      if (j == target) v -= s;
      dr[j] = convert<O>(v);
    }
  }
}

template <class T, class O>
void chunk_backward_typed(const Tensor& logits, const Tensor& lse, const Tensor& scale, const Tensor& targets,
                          std::int64_t v0, Tensor& dlogits) {
  const std::int64_t rows = logits.shape()[0], cols = logits.shape()[1];
  const LaunchShape shape{grid_for(rows, 1), kThreads};
  if (targets.dtype() == DType::i32)
    launch(cross_entropy_chunk_backward_kernel<T, O, std::int32_t>, shape, logits.data<T>(), dlogits.data<O>(),
           lse.data<T>(), scale.data<T>(), targets.data<std::int32_t>(), rows, cols, v0);
  else
    launch(cross_entropy_chunk_backward_kernel<T, O, std::int64_t>, shape, logits.data<T>(), dlogits.data<O>(),
           lse.data<T>(), scale.data<T>(), targets.data<std::int64_t>(), rows, cols, v0);
}

template <class T>
void cross_entropy_chunk_backward(const Tensor& logits, const Tensor& lse, const Tensor& scale, const Tensor& targets,
                                  std::int64_t v0, Tensor& dlogits) {
  check_dtype<T>("cross_entropy_chunk_backward", {{"logits", &logits}, {"lse", &lse}, {"scale", &scale}});
  const bool to_bf16 = std::is_same_v<T, float> && dlogits.dtype() == DType::bf16;
  DARK_CHECK((dlogits.dtype() == logits.dtype() || to_bf16) && dlogits.shape() == logits.shape(),
             "cross_entropy_chunk_backward: dlogits ", dlogits.describe(), " must be like logits ", logits.describe(),
             " (or bf16 for f32 logits)");
  if (logits.numel() == 0) return;
  DeviceGuard guard(logits);
  if (to_bf16) chunk_backward_typed<T, BFloat16>(logits, lse, scale, targets, v0, dlogits);
  else chunk_backward_typed<T, T>(logits, lse, scale, targets, v0, dlogits);
  DARK_CUDA_CHECK_LAUNCH();
}

void check_targets(const Tensor& logits, const Tensor& targets) {
  DARK_CHECK(targets.dtype() == DType::i32 || targets.dtype() == DType::i64,
             "cross_entropy: targets must be i32 or i64, got ", targets.describe());
  DARK_CHECK(targets.device() == logits.device(), "cross_entropy: targets ", targets.describe(), " and logits ",
             logits.describe(), " are on different devices");
}

template <class T, class I>
void forward_typed(const Tensor& logits, const Tensor& targets, Tensor& lse, Tensor& loss, std::int64_t ignore_index) {
  const std::int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  DeviceGuard guard(logits);
  const Device device = logits.device();
  Tensor row_loss = Tensor::empty({rows}, DType::f64, device), counted = Tensor::empty({rows}, DType::f64, device);
  const FirstBad bad(device);
  if (rows > 0)
    launch(cross_entropy_rows_kernel<T, I>, {grid_for(rows, 1), kRowThreads}, logits.data<T>(), targets.data<I>(),
           lse.data<acc_t<T>>(), row_loss.data<double>(), counted.data<double>(), rows, classes, ignore_index,
           bad.slot());
  launch(cross_entropy_mean_kernel<T>, {1, kSumThreads}, row_loss.data<double>(), counted.data<double>(),
         loss.data<T>(), rows);
  if (const std::int64_t r = bad.first(); r >= 0)
    throw Error(str("cross_entropy: target ", integer_at(targets, r), " at row ", r, " is out of range [0, ", classes,
                    ") and is not ignore_index (", ignore_index, ")"));
}

template <class T, class I>
void backward_typed(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                    Tensor& dlogits, std::int64_t ignore_index) {
  const std::int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  if (rows == 0) return;
  DeviceGuard guard(logits);
  Tensor scale = Tensor::empty({1}, DType::f64, logits.device());
  launch(cross_entropy_scale_kernel<T, I>, {1, kSumThreads}, targets.data<I>(), dloss.data<T>(), scale.data<double>(),
         rows, classes, ignore_index);
  launch(cross_entropy_backward_kernel<T, I>, {grid_for(rows, 1), kRowThreads}, logits.data<T>(), targets.data<I>(),
         lse.data<acc_t<T>>(), scale.data<double>(), dlogits.data<T>(), rows, classes, ignore_index);
}

template <class T>
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& lse, Tensor& loss,
                           std::int64_t ignore_index) {
  check_dtype<T>("cross_entropy_forward", {{"logits", &logits}, {"loss", &loss}});
  check_targets(logits, targets);
  if (targets.dtype() == DType::i32) return forward_typed<T, std::int32_t>(logits, targets, lse, loss, ignore_index);
  forward_typed<T, std::int64_t>(logits, targets, lse, loss, ignore_index);
}

template <class T>
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                            Tensor& dlogits, std::int64_t ignore_index) {
  check_dtype<T>("cross_entropy_backward", {{"logits", &logits}, {"dloss", &dloss}, {"dlogits", &dlogits}});
  check_targets(logits, targets);
  if (targets.dtype() == DType::i32)
    return backward_typed<T, std::int32_t>(logits, targets, lse, dloss, dlogits, ignore_index);
  backward_typed<T, std::int64_t>(logits, targets, lse, dloss, dlogits, ignore_index);
}

DARK_REGISTER_KERNEL(cross_entropy_forward, cuda, f32, &cross_entropy_forward<float>);
DARK_REGISTER_KERNEL(cross_entropy_forward, cuda, f64, &cross_entropy_forward<double>);
DARK_REGISTER_KERNEL(cross_entropy_forward, cuda, bf16, &cross_entropy_forward<BFloat16>);
DARK_REGISTER_KERNEL(cross_entropy_backward, cuda, f32, &cross_entropy_backward<float>);
DARK_REGISTER_KERNEL(cross_entropy_backward, cuda, f64, &cross_entropy_backward<double>);
DARK_REGISTER_KERNEL(cross_entropy_backward, cuda, bf16, &cross_entropy_backward<BFloat16>);
DARK_REGISTER_KERNEL(cross_entropy_chunk_backward, cuda, f32, &cross_entropy_chunk_backward<float>);
DARK_REGISTER_KERNEL(row_logsumexp, cuda, f32, &row_logsumexp<float>);
DARK_REGISTER_KERNEL(row_logsumexp, cuda, f64, &row_logsumexp<double>);
DARK_REGISTER_KERNEL(cross_entropy_chunk_backward, cuda, f64, &cross_entropy_chunk_backward<double>);

}  // namespace
}  // namespace dark::cuda
