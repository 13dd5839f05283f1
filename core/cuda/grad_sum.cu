// grad_sum on CUDA (core/kernels.h): f32 sums of f32 / bf16 gradients in one pass, rounded to
// f32 or bf16, in 16-byte accesses (core/cuda/vector_access.cuh).
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

template <class O, class A, class B>
void launch_sum(const Tensor& a, const Tensor& b, Tensor& out) {
  const std::int64_t n = out.numel();
  launch(grad_sum_kernel<O, A, B>, {grid_for_packs<A, B, O>(n), kThreads}, a.data<A>(), b.data<B>(), out.data<O>(), n);
  DARK_CUDA_CHECK_LAUNCH();
}

template <class O>
void grad_sum(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  const bool a_bf16 = a.dtype() == DType::bf16, b_bf16 = b.dtype() == DType::bf16;
  if (a_bf16 && b_bf16) return launch_sum<O, BFloat16, BFloat16>(a, b, out);
  if (a_bf16) return launch_sum<O, BFloat16, float>(a, b, out);
  if (b_bf16) return launch_sum<O, float, BFloat16>(a, b, out);
  launch_sum<O, float, float>(a, b, out);
}

DARK_REGISTER_KERNEL(grad_sum, cuda, f32, &grad_sum<float>);
DARK_REGISTER_KERNEL(grad_sum, cuda, bf16, &grad_sum<BFloat16>);

}  // namespace
}  // namespace dark::cuda
