// CPU reductions over the middle axis of x: (outer, n, inner) -> (outer, inner).
// Sums accumulate in double, in a fixed order, so results are deterministic.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

// Reduces x[o, :, i] for one (o, i) pair; `step` is the stride between consecutive items.
template <class T>
double reduce_line(ReduceOp op, const T* x, std::int64_t n, std::int64_t step) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: {
      double acc = 0;
      for (std::int64_t j = 0; j < n; ++j) acc += static_cast<double>(x[j * step]);
      return op == ReduceOp::mean ? acc / static_cast<double>(n) : acc;
    }
    case ReduceOp::max:
    case ReduceOp::min: {
      double best = op == ReduceOp::max ? -std::numeric_limits<double>::infinity()
                                        : std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < n; ++j) {
        const double v = static_cast<double>(x[j * step]);
        if (std::isnan(v)) return v;
        best = op == ReduceOp::max ? (v > best ? v : best) : (v < best ? v : best);
      }
      return best;
    }
    case ReduceOp::logsumexp: {
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(x[j * step]));
      if (std::isinf(m)) return m;  // all -inf (empty mass) or +inf
      double acc = 0;
      for (std::int64_t j = 0; j < n; ++j) acc += std::exp(static_cast<double>(x[j * step]) - m);
      return m + std::log(acc);
    }
  }
  return 0;
}

template <class T>
void reduce_kernel(ReduceOp op, const Tensor& x, Tensor& out, std::int64_t outer, std::int64_t n,
                   std::int64_t inner) {
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const std::int64_t lines = outer * inner;
  parallel_for(lines, std::max<std::int64_t>(1, kGrainCheap / std::max<std::int64_t>(n, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t line = begin; line < end; ++line) {
                   const std::int64_t o = line / inner, i = line % inner;
                   po[line] = static_cast<T>(reduce_line(op, px + o * n * inner + i, n, inner));
                 }
               });
}

DARK_REGISTER_KERNEL(reduce, cpu, f32, reduce_kernel<float>);
DARK_REGISTER_KERNEL(reduce, cpu, f64, reduce_kernel<double>);

}  // namespace
}  // namespace dark::cpu
