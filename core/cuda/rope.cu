// Rotary embedding for f32, f64 and bf16 (core/kernels.h): x, y: (B, T, H, D) contiguous,
// cos / sin tables (T, D/2) in acc_t<T>; pairs (i, i + D/2) of each row rotate by the angle
// of position t (inverse: by minus it). The CPU's formulas:
//   y[i] = a cos - b s,  y[i + D/2] = b cos + a s,  s = +-sin.
// One block per (b, t) slice of H D elements (its position found once), threads over the
// slice's H D/2 pairs (and a second tensor's, queries and keys in one launch): 32-bit index
// arithmetic per pair where a flat 64-bit index took four 64-bit divisions, dozens of
// instructions each.
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

// Pair p of a (b, t) slice: elements (i, i + half) of head p / half, rotated into ys.
template <class T>
__device__ __forceinline__ void rotate_pair(const T* xs, T* ys, const acc_t<T>* cos_t, const acc_t<T>* sin_t, int p,
                                            int half, acc_t<T> sign) {
  using A = acc_t<T>;
  const int h = p / half, i = p - h * half;
  const int base = h * 2 * half;
  const A a = load(xs, base + i), b = load(xs, base + i + half);
  const A c = cos_t[i], s = sign * sin_t[i];
  store(ys, base + i, a * c - b * s);
  store(ys, base + i + half, b * c + a * s);
}

// One block per (b, t) slice of both tensors: its threads go over x's heads * half pairs, then
// x2's heads2 * half (none when x2 is absent).
template <class T>
__global__ void rope_kernel(const T* x, const T* x2, const acc_t<T>* cos, const acc_t<T>* sin, T* y, T* y2,
                            std::int64_t slices, std::int64_t t_len, int heads, int heads2, int half, acc_t<T> sign) {
  using A = acc_t<T>;
  const int pairs = heads * half, pairs2 = heads2 * half;
  for (std::int64_t slice = blockIdx.x; slice < slices; slice += gridDim.x) {
    const std::int64_t t = slice % t_len;
    const A* cos_t = cos + t * half;
    const A* sin_t = sin + t * half;
    for (int p = threadIdx.x; p < pairs + pairs2; p += blockDim.x) {
      if (p < pairs)
        rotate_pair(x + slice * 2 * pairs, y + slice * 2 * pairs, cos_t, sin_t, p, half, sign);
      else
        rotate_pair(x2 + slice * 2 * pairs2, y2 + slice * 2 * pairs2, cos_t, sin_t, p - pairs, half, sign);
    }
  }
}

template <class T>
void rope(const Tensor& x, const Tensor& x2, const Tensor& cos, const Tensor& sin, Tensor& y, Tensor& y2,
          bool inverse) {
  check_dtype<T>("rope", {{"x", &x}, {"y", &y}});
  DARK_CHECK(cos.dtype() == dtype_of<acc_t<T>>::value && sin.dtype() == cos.dtype(), "rope: tables ", cos.describe(),
             " must be ", dtype_name(dtype_of<acc_t<T>>::value));
  const std::int64_t t_len = x.shape()[1], heads = x.shape()[2], half = x.shape()[3] / 2;
  const std::int64_t heads2 = x2.defined() ? x2.shape()[2] : 0;  // its other sizes are x's (rope_pair checked)
  if (x2.defined()) check_dtype<T>("rope", {{"x2", &x2}, {"y2", &y2}});
  const std::int64_t slices = x.shape()[0] * t_len;
  if (slices * (heads + heads2) * half == 0) return;
  DARK_CHECK((heads + heads2) * half <= (std::int64_t{1} << 30), "rope: ", heads + heads2, " heads of ", 2 * half,
             " dimensions are more than one position's 32-bit indexing allows");
  DeviceGuard guard(x);
  launch(rope_kernel<T>, {grid_for(slices, 1), kThreads}, x.data<T>(), x2.defined() ? x2.data<T>() : nullptr,
         cos.data<acc_t<T>>(), sin.data<acc_t<T>>(), y.data<T>(), x2.defined() ? y2.data<T>() : nullptr, slices, t_len,
         static_cast<int>(heads), static_cast<int>(heads2), static_cast<int>(half),
         static_cast<acc_t<T>>(inverse ? -1 : 1));
}

DARK_REGISTER_KERNEL(rope, cuda, f32, &rope<float>);
DARK_REGISTER_KERNEL(rope, cuda, f64, &rope<double>);
DARK_REGISTER_KERNEL(rope, cuda, bf16, &rope<BFloat16>);

}  // namespace
}  // namespace dark::cuda
