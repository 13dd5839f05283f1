// CPU rotary embedding (rotate-half pairs (i, i + D/2)) over rows of x: (B, T, H, D), with
// cos / sin tables (T, D/2). The backward is the same kernel rotating by the negative angle.
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

#define DARK_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

// Rows [begin, end) of the flattened (B*T*H, D) view; sign = -1 rotates backwards.
template <class T>
DARK_INLINE void rope_rows(const T* x, const T* cos, const T* sin, T* y, std::int64_t begin, std::int64_t end,
                           std::int64_t t_len, std::int64_t heads, std::int64_t d, T sign) {
  const std::int64_t half = d / 2;
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t t = (r / heads) % t_len;
    const T* c = cos + t * half;
    const T* s = sin + t * half;
    const T* xr = x + r * d;
    T* yr = y + r * d;
#pragma omp simd
    for (std::int64_t i = 0; i < half; ++i) {
      const T a = xr[i], b = xr[i + half], si = sign * s[i];
      yr[i] = a * c[i] - b * si;
      yr[i + half] = b * c[i] + a * si;
    }
  }
}

DARK_CPU_CLONES void rope_rows_f32(const float* x, const float* cos, const float* sin, float* y, std::int64_t begin,
                                   std::int64_t end, std::int64_t t_len, std::int64_t heads, std::int64_t d,
                                   float sign) {
  rope_rows(x, cos, sin, y, begin, end, t_len, heads, d, sign);
}

template <class T>
void rope_one(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y, bool inverse) {
  const std::int64_t t_len = x.shape()[1], heads = x.shape()[2], d = x.shape()[3];
  const std::int64_t rows = x.shape()[0] * t_len * heads;
  const T* px = x.data<T>();
  const T* pc = cos.data<T>();
  const T* ps = sin.data<T>();
  T* py = y.data<T>();
  const T sign = inverse ? T(-1) : T(1);
  parallel_for(rows, std::max<std::int64_t>(1, kGrainCheap / std::max<std::int64_t>(d, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 if constexpr (std::is_same_v<T, float>)
                   rope_rows_f32(px, pc, ps, py, begin, end, t_len, heads, d, sign);
                 else
                   rope_rows(px, pc, ps, py, begin, end, t_len, heads, d, sign);
               });
}

template <class T>
void rope_kernel(const Tensor& x, const Tensor& x2, const Tensor& cos, const Tensor& sin, Tensor& y, Tensor& y2,
                 bool inverse) {
  rope_one<T>(x, cos, sin, y, inverse);
  if (x2.defined()) rope_one<T>(x2, cos, sin, y2, inverse);
}

DARK_REGISTER_KERNEL(rope, cpu, f32, rope_kernel<float>);
DARK_REGISTER_KERNEL(rope, cpu, f64, rope_kernel<double>);

}  // namespace
}  // namespace dark::cpu
