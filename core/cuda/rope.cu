// Rotary embedding for f32, f64 and bf16 (core/kernels.h): x, y: (B, T, H, D) contiguous,
// cos / sin tables (T, D/2) in acc_t<T>; pairs (i, i + D/2) of each row rotate by the angle
// of position t (inverse: by minus it). One thread per pair, the CPU's formulas:
//   y[i] = a cos - b s,  y[i + D/2] = b cos + a s,  s = +-sin.
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

template <class T>
__global__ void rope_kernel(const T* x, const acc_t<T>* cos, const acc_t<T>* sin, T* y, std::int64_t pairs,
                            std::int64_t t_len, std::int64_t heads, std::int64_t half, acc_t<T> sign) {
  using A = acc_t<T>;
  for (std::int64_t e = global_thread(); e < pairs; e += grid_threads()) {
    const std::int64_t i = e % half, row = e / half;
    const std::int64_t t = (row / heads) % t_len;
    const std::int64_t base = row * 2 * half;
    const A a = load(x, base + i), b = load(x, base + i + half);
    const A c = cos[t * half + i], s = sign * sin[t * half + i];
    store(y, base + i, a * c - b * s);
    store(y, base + i + half, b * c + a * s);
  }
}

template <class T>
void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y, bool inverse) {
  check_dtype<T>("rope", {{"x", &x}, {"y", &y}});
  DARK_CHECK(cos.dtype() == dtype_of<acc_t<T>>::value && sin.dtype() == cos.dtype(), "rope: tables ", cos.describe(),
             " must be ", dtype_name(dtype_of<acc_t<T>>::value));
  const std::int64_t t_len = x.shape()[1], heads = x.shape()[2], half = x.shape()[3] / 2;
  const std::int64_t pairs = x.numel() / 2;
  if (pairs == 0) return;
  DeviceGuard guard(x);
  launch(rope_kernel<T>, {grid_for(pairs), kThreads}, x.data<T>(), cos.data<acc_t<T>>(), sin.data<acc_t<T>>(),
         y.data<T>(), pairs, t_len, heads, half, static_cast<acc_t<T>>(inverse ? -1 : 1));
}

DARK_REGISTER_KERNEL(rope, cuda, f32, &rope<float>);
DARK_REGISTER_KERNEL(rope, cuda, f64, &rope<double>);
DARK_REGISTER_KERNEL(rope, cuda, bf16, &rope<BFloat16>);

}  // namespace
}  // namespace dark::cuda
