// grad_sum on CUDA (core/kernels.h): f32 sums of two or three f32 / bf16 gradients in one
// pass, rounded to f32 or bf16, in 16-byte accesses (core/cuda/vector_access.cuh).
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/cuda/vector_access.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

template <class O, class A, class B>
__global__ void grad_sum_kernel(const A* a, const B* b, O* out, std::int64_t n) {
  for_each_contiguous(n, [](A x, B y, O& z) { z = convert<O>(convert<float>(x) + convert<float>(y)); }, a, b, out);
}

// ((a + b) + c), each sum rounded to f32, as two two-term sums into f32 would.
template <class O, class A, class B, class C>
__global__ void grad_sum3_kernel(const A* a, const B* b, const C* c, O* out, std::int64_t n) {
  for_each_contiguous(
      n,
      [](A x, B y, C w, O& z) {
        const float xy = __fadd_rn(convert<float>(x), convert<float>(y));
        z = convert<O>(__fadd_rn(xy, convert<float>(w)));
      },
      a, b, c, out);
}

// Calls f with a value of the element type of t (f32 or bf16).
template <class F>
void with_element_type(const Tensor& t, F&& f) {
  if (t.dtype() == DType::bf16) f(BFloat16{});
  else f(float{});
}

template <class O>
void grad_sum(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  with_element_type(a, [&](auto x) {
    with_element_type(b, [&](auto y) {
      using A = decltype(x);
      using B = decltype(y);
      if (!c.defined()) {
        launch(grad_sum_kernel<O, A, B>, {grid_for_packs<A, B, O>(n), kThreads}, a.data<A>(), b.data<B>(),
               out.data<O>(), n);
        return;
      }
      with_element_type(c, [&](auto z) {
        using C = decltype(z);
        launch(grad_sum3_kernel<O, A, B, C>, {grid_for_packs<A, B, C, O>(n), kThreads}, a.data<A>(), b.data<B>(),
               c.data<C>(), out.data<O>(), n);
      });
    });
  });
  DARK_CUDA_CHECK_LAUNCH();
}

DARK_REGISTER_KERNEL(grad_sum, cuda, f32, &grad_sum<float>);
DARK_REGISTER_KERNEL(grad_sum, cuda, bf16, &grad_sum<BFloat16>);

}  // namespace
}  // namespace dark::cuda
