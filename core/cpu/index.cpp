// CPU gather / scatter-add along the middle axis of (outer, n, inner) (the kernels of
// embedding and index_select) and cumulative sums. scatter-add is deterministic: each
// output element is owned by one thread and indices are visited in order.
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

// Throws the shared message (see kernels.h) for the first index outside [0, n).
template <class I>
void check_indices(const char* kernel, const I* idx, std::int64_t k, std::int64_t n) {
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t v = static_cast<std::int64_t>(idx[j]);
    if (v < 0 || v >= n) throw Error(index_out_of_range(kernel, v, j, n));
  }
}

template <class T, class I>
void gather_typed(const Tensor& x, const Tensor& index, Tensor& out, std::int64_t outer, std::int64_t n,
                  std::int64_t inner) {
  const T* px = x.data<T>();
  const I* pi = index.data<I>();
  T* po = out.data<T>();
  const std::int64_t k = index.numel();
  check_indices("gather", pi, k, n);  // fail before writing anything
  parallel_for(outer * k, std::max<std::int64_t>(1, kGrainCheap / std::max<std::int64_t>(inner, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r) {
                   const std::int64_t o = r / k, j = r % k;
                   const T* src = px + (o * n + static_cast<std::int64_t>(pi[j])) * inner;
                   T* dst = po + r * inner;
                   for (std::int64_t i = 0; i < inner; ++i) dst[i] = src[i];
                 }
               });
}

template <class T, class I>
void scatter_add_typed(const Tensor& dout, const Tensor& index, Tensor& dx, std::int64_t outer,
                       std::int64_t n, std::int64_t inner) {
  const T* pd = dout.data<T>();
  const I* pi = index.data<I>();
  T* px = dx.data<T>();
  const std::int64_t k = index.numel();
  check_indices("scatter_add", pi, k, n);
  // Threads own disjoint (outer, inner-range) columns; each walks all k indices in order.
  constexpr std::int64_t kColumns = 64;
  const std::int64_t column_blocks = (inner + kColumns - 1) / kColumns;
  parallel_for(outer * column_blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t o = t / column_blocks;
      const std::int64_t c0 = (t % column_blocks) * kColumns, c1 = std::min(inner, c0 + kColumns);
      for (std::int64_t j = 0; j < k; ++j) {
        const T* src = pd + (o * k + j) * inner;
        T* dst = px + (o * n + static_cast<std::int64_t>(pi[j])) * inner;
        for (std::int64_t i = c0; i < c1; ++i) dst[i] += src[i];
      }
    }
  });
}

template <class T>
void gather_kernel(const Tensor& x, const Tensor& index, Tensor& out, std::int64_t outer, std::int64_t n,
                   std::int64_t inner) {
  if (index.dtype() == DType::i32) return gather_typed<T, std::int32_t>(x, index, out, outer, n, inner);
  DARK_CHECK(index.dtype() == DType::i64, "gather: index must be i32 or i64, got ", dtype_name(index.dtype()));
  gather_typed<T, std::int64_t>(x, index, out, outer, n, inner);
}

template <class T>
void scatter_add_kernel(const Tensor& dout, const Tensor& index, Tensor& dx, std::int64_t outer,
                        std::int64_t n, std::int64_t inner) {
  if (index.dtype() == DType::i32) return scatter_add_typed<T, std::int32_t>(dout, index, dx, outer, n, inner);
  DARK_CHECK(index.dtype() == DType::i64, "scatter_add: index must be i32 or i64, got ",
             dtype_name(index.dtype()));
  scatter_add_typed<T, std::int64_t>(dout, index, dx, outer, n, inner);
}

template <class T>
void cumsum_kernel(const Tensor& x, Tensor& out, std::int64_t outer, std::int64_t n, std::int64_t inner,
                   bool reverse) {
  const T* px = x.data<T>();
  T* po = out.data<T>();
  parallel_for(outer * inner, std::max<std::int64_t>(1, kGrainCheap / std::max<std::int64_t>(n, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t line = begin; line < end; ++line) {
                   const std::int64_t o = line / inner, i = line % inner;
                   const std::int64_t base = o * n * inner + i;
                   T acc = 0;
                   for (std::int64_t s = 0; s < n; ++s) {
                     const std::int64_t j = reverse ? n - 1 - s : s;
                     acc += px[base + j * inner];
                     po[base + j * inner] = acc;
                   }
                 }
               });
}

DARK_REGISTER_KERNEL(gather, cpu, f32, gather_kernel<float>);
DARK_REGISTER_KERNEL(gather, cpu, f64, gather_kernel<double>);
DARK_REGISTER_KERNEL(gather, cpu, i32, gather_kernel<std::int32_t>);
DARK_REGISTER_KERNEL(gather, cpu, i64, gather_kernel<std::int64_t>);
DARK_REGISTER_KERNEL(scatter_add, cpu, f32, scatter_add_kernel<float>);
DARK_REGISTER_KERNEL(scatter_add, cpu, f64, scatter_add_kernel<double>);
DARK_REGISTER_KERNEL(cumsum, cpu, f32, cumsum_kernel<float>);
DARK_REGISTER_KERNEL(cumsum, cpu, f64, cumsum_kernel<double>);
DARK_REGISTER_KERNEL(cumsum, cpu, i32, cumsum_kernel<std::int32_t>);
DARK_REGISTER_KERNEL(cumsum, cpu, i64, cumsum_kernel<std::int64_t>);

}  // namespace
}  // namespace dark::cpu
