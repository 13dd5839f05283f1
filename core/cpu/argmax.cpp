// CPU argmax over the last axis (see core/kernels.h): the first index of each row's largest
// element, compared exactly as std::max_element compares (so CPU results equal a host loop).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/bfloat16.h"
#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

template <class T>
void argmax_kernel(const Tensor& x, Tensor& out) {
  // bf16 compares as the float it stands for; float and double as themselves.
  using Key = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const std::int64_t n = x.size(static_cast<std::int64_t>(x.dim()) - 1);
  const std::int64_t rows = n > 0 ? x.numel() / n : 0;
  const T* px = x.data<T>();
  std::int64_t* po = out.data<std::int64_t>();
  parallel_for(rows, std::max<std::int64_t>(1, kGrainCheap / std::max<std::int64_t>(n, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) {
                   const T* row = px + r * n;
                   std::int64_t best = 0;
                   for (std::int64_t j = 1; j < n; ++j)
                     if (static_cast<Key>(row[best]) < static_cast<Key>(row[j])) best = j;
                   po[r] = best;
                 }
               });
}

DARK_REGISTER_KERNEL(argmax, cpu, f32, argmax_kernel<float>);
DARK_REGISTER_KERNEL(argmax, cpu, f64, argmax_kernel<double>);
DARK_REGISTER_KERNEL(argmax, cpu, bf16, argmax_kernel<BFloat16>);

}  // namespace
}  // namespace dark::cpu
