// CPU softmax / log-softmax over the last axis of (rows, n), forward and backward.
// Stable: the row max is subtracted before exponentiating.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

template <class T>
void softmax_row(const T* x, T* y, std::int64_t n, bool log) {
  T m = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  if (m == -std::numeric_limits<T>::infinity()) m = 0;  // fully masked row: avoid inf - inf
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < n; ++j) {
    const T e = vmath::exp(x[j] - m);
    if (!log) y[j] = e;
    sum += e;
  }
  if (log) {
    const T shift = m + vmath::log(sum);
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) y[j] = x[j] - shift;
  } else {
    const T inv = T(1) / sum;
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) y[j] *= inv;
  }
}

template <class T>
void softmax_forward_kernel(const Tensor& x, Tensor& y, bool log) {
  const std::int64_t n = x.shape().back();
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  parallel_for(rows, std::max<std::int64_t>(1, kGrainHeavy / std::max<std::int64_t>(n, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) softmax_row(px + r * n, py + r * n, n, log);
               });
}

template <class T>
void softmax_backward_kernel(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  const std::int64_t n = y.shape().back();
  const std::int64_t rows = n == 0 ? 0 : y.numel() / n;
  const T* py = y.data<T>();
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  parallel_for(rows, std::max<std::int64_t>(1, kGrainHeavy / std::max<std::int64_t>(n, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) {
                   const T* yr = py + r * n;
                   const T* dyr = pdy + r * n;
                   T* dxr = pdx + r * n;
                   T acc = 0;
                   if (log) {
                     // d log_softmax: dx = dy - softmax * sum(dy)
                     for (std::int64_t j = 0; j < n; ++j) acc += dyr[j];
#pragma omp simd
                     for (std::int64_t j = 0; j < n; ++j) dxr[j] = dyr[j] - vmath::exp(yr[j]) * acc;
                   } else {
                     // d softmax: dx = y * (dy - sum(dy * y))
                     for (std::int64_t j = 0; j < n; ++j) acc += dyr[j] * yr[j];
#pragma omp simd
                     for (std::int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - acc);
                   }
                 }
               });
}

DARK_REGISTER_KERNEL(softmax_forward, cpu, f32, softmax_forward_kernel<float>);
DARK_REGISTER_KERNEL(softmax_forward, cpu, f64, softmax_forward_kernel<double>);
DARK_REGISTER_KERNEL(softmax_backward, cpu, f32, softmax_backward_kernel<float>);
DARK_REGISTER_KERNEL(softmax_backward, cpu, f64, softmax_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
