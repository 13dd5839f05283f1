// grad_sum on the CPU (core/kernels.h): float32 sums of f32 / bf16 gradients.
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

template <class A, class B>
void sum_into(const Tensor& a, const Tensor& b, Tensor& out) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  float* po = out.data<float>();
  parallel_for(out.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) po[i] = static_cast<float>(pa[i]) + static_cast<float>(pb[i]);
  });
}

void grad_sum(const Tensor& a, const Tensor& b, Tensor& out) {
  const bool a_bf16 = a.dtype() == DType::bf16, b_bf16 = b.dtype() == DType::bf16;
  if (a_bf16 && b_bf16) return sum_into<BFloat16, BFloat16>(a, b, out);
  if (a_bf16) return sum_into<BFloat16, float>(a, b, out);
  if (b_bf16) return sum_into<float, BFloat16>(a, b, out);
  sum_into<float, float>(a, b, out);
}

DARK_REGISTER_KERNEL(grad_sum, cpu, f32, grad_sum);

}  // namespace
}  // namespace dark::cpu
