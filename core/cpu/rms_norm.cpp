// CPU RMSNorm over the last axis of x: (R, D), forward and backward. The weight gradient
// sums over rows in fixed chunks (partial sums per chunk, then the chunks in order), so it
// is bitwise reproducible for any thread count. float32 row loops are compiled for several
// instruction sets (target_clones, as in core/cpu/elementwise.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

#define DARK_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

// residual null: the norm of x. Otherwise of s = x + residual (rounded to T, as the add op
// does), written to sum first and normed from there.
template <class T>
DARK_INLINE void rms_norm_rows(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t d, T eps,
                               const T* residual, T* sum) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    if (residual) {
      const T* rr = residual + r * d;
      T* sr = sum + r * d;
#pragma omp simd
      for (std::int64_t j = 0; j < d; ++j) sr[j] = xr[j] + rr[j];
      xr = sr;
    }
    T* yr = y + r * d;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (std::int64_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
    const T rs = T(1) / std::sqrt(ss / static_cast<T>(d) + eps);
    rstd[r] = rs;
#pragma omp simd
    for (std::int64_t j = 0; j < d; ++j) yr[j] = xr[j] * rs * w[j];
  }
}

// Rows [0, rows) of one chunk: dx rows (if dx) and this chunk's weight-gradient partial
// dw_part (if dw_part; overwritten).
template <class T>
DARK_INLINE void rms_norm_backward_rows(const T* x, const T* w, const T* rstd, const T* dy, T* dx, T* dw_part,
                                        std::int64_t rows, std::int64_t d, const T* dsum) {
  if (dw_part) std::fill(dw_part, dw_part + d, T(0));
  const T inv_d = T(1) / static_cast<T>(d);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const T rs = rstd[r];
    if (dx) {
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (std::int64_t j = 0; j < d; ++j) dot += dyr[j] * w[j] * xr[j];
      const T c = rs * rs * rs * dot * inv_d;
      T* dxr = dx + r * d;
#pragma omp simd
      for (std::int64_t j = 0; j < d; ++j) dxr[j] = rs * w[j] * dyr[j] - xr[j] * c;
      if (dsum) {  // the fused residual add's output gradient, added after the rounding above
        const T* dsr = dsum + r * d;
#pragma omp simd
        for (std::int64_t j = 0; j < d; ++j) dxr[j] += dsr[j];
      }
    }
    if (dw_part) {
#pragma omp simd
      for (std::int64_t j = 0; j < d; ++j) dw_part[j] += dyr[j] * xr[j] * rs;
    }
  }
}

DARK_CPU_CLONES void rms_norm_rows_f32(const float* x, const float* w, float* y, float* rstd, std::int64_t rows,
                                       std::int64_t d, float eps, const float* residual, float* sum) {
  rms_norm_rows(x, w, y, rstd, rows, d, eps, residual, sum);
}

DARK_CPU_CLONES void rms_norm_backward_rows_f32(const float* x, const float* w, const float* rstd, const float* dy,
                                                float* dx, float* dw_part, std::int64_t rows, std::int64_t d,
                                                const float* dsum) {
  rms_norm_backward_rows(x, w, rstd, dy, dx, dw_part, rows, d, dsum);
}

template <class T>
void rms_norm_forward_kernel(const Tensor& x, const Tensor& weight, Tensor& y, Tensor& rstd, double eps,
                             const Tensor& residual, Tensor& sum) {
  const std::int64_t d = x.shape().back();
  const std::int64_t rows = rstd.numel();
  const T* px = x.data<T>();
  const T* pw = weight.data<T>();
  T* py = y.data<T>();
  T* pr = rstd.data<T>();
  const T* pres = residual.defined() ? residual.data<T>() : nullptr;
  T* psum = residual.defined() ? sum.data<T>() : nullptr;
  parallel_for(rows, std::max<std::int64_t>(1, kGrainCheap / std::max<std::int64_t>(d, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 const T* res = pres ? pres + begin * d : nullptr;
                 T* s = psum ? psum + begin * d : nullptr;
                 if constexpr (std::is_same_v<T, float>)
                   rms_norm_rows_f32(px + begin * d, pw, py + begin * d, pr + begin, end - begin, d,
                                     static_cast<float>(eps), res, s);
                 else
                   rms_norm_rows(px + begin * d, pw, py + begin * d, pr + begin, end - begin, d, static_cast<T>(eps),
                                 res, s);
               });
}

// The row chunking of the weight gradient depends only on the shape (never on threads).
constexpr std::int64_t kMaxChunks = 64;
constexpr std::int64_t kMinRowsPerChunk = 8;

template <class T>
void rms_norm_backward_kernel(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                              Tensor& dweight, const Tensor& dsum) {
  const std::int64_t d = x.shape().back();
  const std::int64_t rows = rstd.numel();
  const T* px = x.data<T>();
  const T* pw = weight.data<T>();
  const T* pr = rstd.data<T>();
  const T* pdy = dy.data<T>();
  T* pdx = dx.defined() ? dx.data<T>() : nullptr;
  const T* pdsum = dsum.defined() ? dsum.data<T>() : nullptr;
  const bool want_dw = dweight.defined();
  if (!pdx && !want_dw) return;
  const std::int64_t per_chunk =
      std::max(kMinRowsPerChunk, (rows + kMaxChunks - 1) / kMaxChunks);
  const std::int64_t chunks = (rows + per_chunk - 1) / per_chunk;
  std::vector<T> partial(want_dw ? static_cast<std::size_t>(chunks * d) : 0);
  parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const std::int64_t r0 = c * per_chunk, n = std::min(rows, r0 + per_chunk) - r0;
      T* dxc = pdx ? pdx + r0 * d : nullptr;
      T* part = want_dw ? partial.data() + c * d : nullptr;
      const T* dsc = pdsum ? pdsum + r0 * d : nullptr;
      if constexpr (std::is_same_v<T, float>)
        rms_norm_backward_rows_f32(px + r0 * d, pw, pr + r0, pdy + r0 * d, dxc, part, n, d, dsc);
      else
        rms_norm_backward_rows(px + r0 * d, pw, pr + r0, pdy + r0 * d, dxc, part, n, d, dsc);
    }
  });
  if (want_dw) {
    std::vector<double> acc(static_cast<std::size_t>(d), 0.0);
    for (std::int64_t c = 0; c < chunks; ++c)
      for (std::int64_t j = 0; j < d; ++j) acc[j] += static_cast<double>(partial[c * d + j]);
    T* pdw = dweight.data<T>();
    for (std::int64_t j = 0; j < d; ++j) pdw[j] = static_cast<T>(acc[j]);
  }
}

DARK_REGISTER_KERNEL(rms_norm_forward, cpu, f32, rms_norm_forward_kernel<float>);
DARK_REGISTER_KERNEL(rms_norm_forward, cpu, f64, rms_norm_forward_kernel<double>);
DARK_REGISTER_KERNEL(rms_norm_backward, cpu, f32, rms_norm_backward_kernel<float>);
DARK_REGISTER_KERNEL(rms_norm_backward, cpu, f64, rms_norm_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
