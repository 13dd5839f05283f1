// CPU fused cross entropy over rows of logits: (N, V). Forward: per-row logsumexp (stable,
// max subtracted), the row losses, and their mean over counted rows summed in row order in
// double (deterministic). Backward: dlogits = (softmax - onehot) * dloss / count, rebuilt
// from the saved logsumexp, never storing the softmax.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

#define DARK_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

template <class T>
DARK_INLINE T row_logsumexp(const T* x, std::int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (std::int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  if (m == -std::numeric_limits<T>::infinity() || m == std::numeric_limits<T>::infinity()) return m;
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < n; ++j) sum += vmath::exp(x[j] - m);
  return m + vmath::log(sum);
}

// dx = exp(x - lse) * scale (the target's -scale is added by the caller).
template <class T>
DARK_INLINE void row_softmax_scaled(const T* x, T* dx, std::int64_t n, T lse, T scale) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) dx[j] = vmath::exp(x[j] - lse) * scale;
}

DARK_CPU_CLONES float row_logsumexp_f32(const float* x, std::int64_t n) { return row_logsumexp(x, n); }
DARK_CPU_CLONES void row_softmax_scaled_f32(const float* x, float* dx, std::int64_t n, float lse, float scale) {
  row_softmax_scaled(x, dx, n, lse, scale);
}

template <class T>
T logsumexp_of(const T* x, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) return row_logsumexp_f32(x, n);
  else return row_logsumexp(x, n);
}

// Checks every target before anything is written; returns the number of counted rows.
template <class I>
std::int64_t count_targets(const I* targets, std::int64_t rows, std::int64_t classes, std::int64_t ignore_index) {
  std::int64_t count = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = static_cast<std::int64_t>(targets[r]);
    if (t == ignore_index) continue;
    DARK_CHECK(t >= 0 && t < classes, "cross_entropy: target ", t, " at row ", r, " is out of range [0, ", classes,
               ") and is not ignore_index (", ignore_index, ")");
    ++count;
  }
  return count;
}

template <class T, class I>
void forward_typed(const Tensor& logits, const Tensor& targets, Tensor& lse, Tensor& loss, std::int64_t ignore_index) {
  const std::int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  const T* px = logits.data<T>();
  const I* pt = targets.data<I>();
  T* plse = lse.data<T>();
  const std::int64_t count = count_targets(pt, rows, classes, ignore_index);
  std::vector<T> row_loss(static_cast<std::size_t>(rows));
  parallel_for(rows, std::max<std::int64_t>(1, kGrainHeavy / std::max<std::int64_t>(classes, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) {
                   const std::int64_t t = static_cast<std::int64_t>(pt[r]);
                   if (t == ignore_index) {
                     plse[r] = 0;
                     row_loss[r] = 0;
                     continue;
                   }
                   const T* xr = px + r * classes;
                   plse[r] = logsumexp_of(xr, classes);
                   row_loss[r] = plse[r] - xr[t];
                 }
               });
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) total += static_cast<double>(row_loss[r]);
  loss.data<T>()[0] = static_cast<T>(count > 0 ? total / static_cast<double>(count) : 0.0);
}

template <class T, class I>
void backward_typed(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                    Tensor& dlogits, std::int64_t ignore_index) {
  const std::int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  const T* px = logits.data<T>();
  const I* pt = targets.data<I>();
  const T* plse = lse.data<T>();
  T* pdx = dlogits.data<T>();
  const std::int64_t count = count_targets(pt, rows, classes, ignore_index);
  const double dloss_value = static_cast<double>(dloss.data<T>()[0]);
  const T scale = count > 0 ? static_cast<T>(dloss_value / static_cast<double>(count)) : T(0);
  parallel_for(rows, std::max<std::int64_t>(1, kGrainHeavy / std::max<std::int64_t>(classes, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) {
                   const std::int64_t t = static_cast<std::int64_t>(pt[r]);
                   T* dxr = pdx + r * classes;
                   if (t == ignore_index) {
                     std::fill(dxr, dxr + classes, T(0));
                     continue;
                   }
                   const T* xr = px + r * classes;
                   if constexpr (std::is_same_v<T, float>) row_softmax_scaled_f32(xr, dxr, classes, plse[r], scale);
                   else row_softmax_scaled(xr, dxr, classes, plse[r], scale);
                   dxr[t] -= scale;
                 }
               });
}

template <class T>
void cross_entropy_forward_kernel(const Tensor& logits, const Tensor& targets, Tensor& lse, Tensor& loss,
                                  std::int64_t ignore_index) {
  if (targets.dtype() == DType::i32)
    return forward_typed<T, std::int32_t>(logits, targets, lse, loss, ignore_index);
  DARK_CHECK(targets.dtype() == DType::i64, "cross_entropy: targets must be i32 or i64, got ", targets.describe());
  forward_typed<T, std::int64_t>(logits, targets, lse, loss, ignore_index);
}

template <class T>
void cross_entropy_backward_kernel(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                                   Tensor& dlogits, std::int64_t ignore_index) {
  if (targets.dtype() == DType::i32)
    return backward_typed<T, std::int32_t>(logits, targets, lse, dloss, dlogits, ignore_index);
  DARK_CHECK(targets.dtype() == DType::i64, "cross_entropy: targets must be i32 or i64, got ", targets.describe());
  backward_typed<T, std::int64_t>(logits, targets, lse, dloss, dlogits, ignore_index);
}

template <class T>
void row_logsumexp_kernel(const Tensor& x, Tensor& lse) {
  const std::int64_t rows = x.shape()[0], cols = x.shape()[1];
  const T* px = x.data<T>();
  T* pl = lse.data<T>();
  parallel_for(rows, std::max<std::int64_t>(1, kGrainHeavy / std::max<std::int64_t>(cols, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) pl[r] = logsumexp_of(px + r * cols, cols);
               });
}

DARK_REGISTER_KERNEL(row_logsumexp, cpu, f32, row_logsumexp_kernel<float>);
DARK_REGISTER_KERNEL(row_logsumexp, cpu, f64, row_logsumexp_kernel<double>);

template <class T, class I>
void chunk_backward_typed(const Tensor& logits, const Tensor& lse, const Tensor& scale, const Tensor& targets,
                          std::int64_t v0, Tensor& dlogits) {
  const std::int64_t rows = logits.shape()[0], cols = logits.shape()[1];
  const T* px = logits.data<T>();
  T* pd = dlogits.data<T>();
  const T* plse = lse.data<T>();
  const T* ps = scale.data<T>();
  const I* pt = targets.data<I>();
  parallel_for(rows, std::max<std::int64_t>(1, kGrainHeavy / std::max<std::int64_t>(cols, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) {
                   const T* xr = px + r * cols;
                   T* dr = pd + r * cols;
                   if constexpr (std::is_same_v<T, float>) row_softmax_scaled_f32(xr, dr, cols, plse[r], ps[r]);
                   else row_softmax_scaled(xr, dr, cols, plse[r], ps[r]);
                   const std::int64_t j = static_cast<std::int64_t>(pt[r]) - v0;
                   if (j >= 0 && j < cols) dr[j] -= ps[r];
                 }
               });
}

template <class T>
void cross_entropy_chunk_backward_kernel(const Tensor& logits, const Tensor& lse, const Tensor& scale,
                                         const Tensor& targets, std::int64_t v0, Tensor& dlogits) {
  DARK_CHECK(dlogits.dtype() == logits.dtype() && dlogits.shape() == logits.shape(),
             "cross_entropy_chunk_backward: dlogits ", dlogits.describe(), " must be like logits ", logits.describe(),
             " on the CPU");
  if (targets.dtype() == DType::i32) return chunk_backward_typed<T, std::int32_t>(logits, lse, scale, targets, v0, dlogits);
  chunk_backward_typed<T, std::int64_t>(logits, lse, scale, targets, v0, dlogits);
}

DARK_REGISTER_KERNEL(cross_entropy_chunk_backward, cpu, f32, cross_entropy_chunk_backward_kernel<float>);
DARK_REGISTER_KERNEL(cross_entropy_chunk_backward, cpu, f64, cross_entropy_chunk_backward_kernel<double>);
DARK_REGISTER_KERNEL(cross_entropy_forward, cpu, f32, cross_entropy_forward_kernel<float>);
DARK_REGISTER_KERNEL(cross_entropy_forward, cpu, f64, cross_entropy_forward_kernel<double>);
DARK_REGISTER_KERNEL(cross_entropy_backward, cpu, f32, cross_entropy_backward_kernel<float>);
DARK_REGISTER_KERNEL(cross_entropy_backward, cpu, f64, cross_entropy_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
