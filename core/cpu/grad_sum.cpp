// grad_sum on the CPU (core/kernels.h): f32 sums of two or three f32 / bf16 gradients,
// rounded to f32 or bf16.
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

// Calls f with a value of the element type of t (f32 or bf16).
template <class F>
void with_element_type(const Tensor& t, F&& f) {
  if (t.dtype() == DType::bf16) f(BFloat16{});
  else f(float{});
}

template <class O, class A, class B>
void sum_into(const Tensor& a, const Tensor& b, Tensor& out) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  O* po = out.data<O>();
  parallel_for(out.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) po[i] = O(static_cast<float>(pa[i]) + static_cast<float>(pb[i]));
  });
}

template <class O, class A, class B, class C>
void sum_into(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  const C* pc = c.data<C>();
  O* po = out.data<O>();
  parallel_for(out.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float ab = static_cast<float>(pa[i]) + static_cast<float>(pb[i]);  // rounded to f32 first
      po[i] = O(ab + static_cast<float>(pc[i]));
    }
  });
}

template <class O>
void grad_sum(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out) {
  with_element_type(a, [&](auto x) {
    with_element_type(b, [&](auto y) {
      using A = decltype(x);
      using B = decltype(y);
      if (!c.defined()) return sum_into<O, A, B>(a, b, out);
      with_element_type(c, [&](auto z) { sum_into<O, A, B, decltype(z)>(a, b, c, out); });
    });
  });
}

DARK_REGISTER_KERNEL(grad_sum, cpu, f32, grad_sum<float>);
DARK_REGISTER_KERNEL(grad_sum, cpu, bf16, grad_sum<BFloat16>);

}  // namespace
}  // namespace dark::cpu
