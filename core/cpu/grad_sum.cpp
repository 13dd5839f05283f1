// grad_sum on the CPU (core/kernels.h): f32 sums of f32 / bf16 gradients, rounded to f32 or
// bf16.
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

template <class O, class A, class B>
void sum_into(const Tensor& a, const Tensor& b, Tensor& out) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  O* po = out.data<O>();
  parallel_for(out.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) po[i] = O(static_cast<float>(pa[i]) + static_cast<float>(pb[i]));
  });
}

template <class O>
void grad_sum(const Tensor& a, const Tensor& b, Tensor& out) {
  const bool a_bf16 = a.dtype() == DType::bf16, b_bf16 = b.dtype() == DType::bf16;
  if (a_bf16 && b_bf16) return sum_into<O, BFloat16, BFloat16>(a, b, out);
  if (a_bf16) return sum_into<O, BFloat16, float>(a, b, out);
  if (b_bf16) return sum_into<O, float, BFloat16>(a, b, out);
  sum_into<O, float, float>(a, b, out);
}

DARK_REGISTER_KERNEL(grad_sum, cpu, f32, grad_sum<float>);
DARK_REGISTER_KERNEL(grad_sum, cpu, bf16, grad_sum<BFloat16>);

}  // namespace
}  // namespace dark::cpu
