// CPU kernels: binary ops (with broadcasting through strides), where, unary forward and
// backward. Contiguous float32 loops are compiled for several instruction sets
// (target_clones: baseline x86-64, x86-64-v3 = AVX2/FMA, x86-64-v4 = AVX-512) and the
// best one the running CPU supports is picked when the library loads.
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/cpu/scalar_ops.h"
#include "core/cpu/strided.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

#define DARK_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

// ---- contiguous float32 fast paths (the hot loops of training) ----
template <BinaryOp Op>
DARK_INLINE void binary_loop(const float* a, const float* b, float* out, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) out[i] = apply_binary<float>(Op, a[i], b[i]);
}

DARK_CPU_CLONES void binary_contiguous_f32(BinaryOp op, const float* a, const float* b, float* out,
                                           std::int64_t n) {
  switch (op) {
#define DARK_CASE(OP) case BinaryOp::OP: binary_loop<BinaryOp::OP>(a, b, out, n); break;
    DARK_CASE(add) DARK_CASE(sub) DARK_CASE(mul) DARK_CASE(div) DARK_CASE(maximum)
    DARK_CASE(minimum) DARK_CASE(pow) DARK_CASE(eq) DARK_CASE(ne) DARK_CASE(lt) DARK_CASE(le)
    DARK_CASE(gt) DARK_CASE(ge)
#undef DARK_CASE
  }
}

template <UnaryOp Op>
DARK_INLINE void unary_loop(const float* x, float* y, std::int64_t n, float alpha) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = apply_unary<float>(Op, x[i], alpha);
}

template <UnaryOp Op>
DARK_INLINE void unary_backward_loop(const float* x, const float* y, const float* dy, float* dx,
                                     std::int64_t n, float alpha) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) dx[i] = apply_unary_backward<float>(Op, x[i], y[i], dy[i], alpha);
}

#define DARK_UNARY_CASES(LOOP, ...)                                                             \
  switch (op) {                                                                                 \
    case UnaryOp::neg: LOOP<UnaryOp::neg>(__VA_ARGS__); break;                                  \
    case UnaryOp::exp: LOOP<UnaryOp::exp>(__VA_ARGS__); break;                                  \
    case UnaryOp::log: LOOP<UnaryOp::log>(__VA_ARGS__); break;                                  \
    case UnaryOp::sqrt: LOOP<UnaryOp::sqrt>(__VA_ARGS__); break;                                \
    case UnaryOp::rsqrt: LOOP<UnaryOp::rsqrt>(__VA_ARGS__); break;                              \
    case UnaryOp::tanh: LOOP<UnaryOp::tanh>(__VA_ARGS__); break;                                \
    case UnaryOp::sigmoid: LOOP<UnaryOp::sigmoid>(__VA_ARGS__); break;                          \
    case UnaryOp::silu: LOOP<UnaryOp::silu>(__VA_ARGS__); break;                                \
    case UnaryOp::gelu: LOOP<UnaryOp::gelu>(__VA_ARGS__); break;                                \
    case UnaryOp::gelu_tanh: LOOP<UnaryOp::gelu_tanh>(__VA_ARGS__); break;                      \
    case UnaryOp::relu: LOOP<UnaryOp::relu>(__VA_ARGS__); break;                                \
    case UnaryOp::abs: LOOP<UnaryOp::abs>(__VA_ARGS__); break;                                  \
    case UnaryOp::square: LOOP<UnaryOp::square>(__VA_ARGS__); break;                            \
    case UnaryOp::sin: LOOP<UnaryOp::sin>(__VA_ARGS__); break;                                  \
    case UnaryOp::cos: LOOP<UnaryOp::cos>(__VA_ARGS__); break;                                  \
    case UnaryOp::reciprocal: LOOP<UnaryOp::reciprocal>(__VA_ARGS__); break;                    \
    case UnaryOp::add_scalar: LOOP<UnaryOp::add_scalar>(__VA_ARGS__); break;                    \
    case UnaryOp::mul_scalar: LOOP<UnaryOp::mul_scalar>(__VA_ARGS__); break;                    \
    case UnaryOp::pow_scalar: LOOP<UnaryOp::pow_scalar>(__VA_ARGS__); break;                    \
  }

DARK_CPU_CLONES void unary_contiguous_f32(UnaryOp op, const float* x, float* y, std::int64_t n, float alpha) {
  DARK_UNARY_CASES(unary_loop, x, y, n, alpha)
}

DARK_CPU_CLONES void unary_backward_contiguous_f32(UnaryOp op, const float* x, const float* y,
                                                   const float* dy, float* dx, std::int64_t n, float alpha) {
  DARK_UNARY_CASES(unary_backward_loop, x, y, dy, dx, n, alpha)
}

bool is_heavy(UnaryOp op) {
  return op != UnaryOp::neg && op != UnaryOp::relu && op != UnaryOp::abs && op != UnaryOp::square &&
         op != UnaryOp::add_scalar && op != UnaryOp::mul_scalar;
}

// ---- generic kernels ----
template <class T>
void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (a.is_contiguous() && b.is_contiguous() && a.numel() == out.numel() && b.numel() == out.numel()) {
      parallel_for(out.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
        binary_contiguous_f32(op, pa + begin, pb + begin, po + begin, end - begin);
      });
      return;
    }
  }
  const Strides out_strides = contiguous_strides(out.shape());
  for_each_row<3>(out.shape(), {&a.strides(), &b.strides(), &out_strides}, kGrainCheap,
                  [&](const auto& off, std::int64_t n, const auto& inner) {
                    const T* ra = pa + off[0];
                    const T* rb = pb + off[1];
                    T* ro = po + off[2];
                    for (std::int64_t i = 0; i < n; ++i)
                      ro[i] = apply_binary<T>(op, ra[i * inner[0]], rb[i * inner[1]]);
                  });
}

template <class T>
void where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  const T* pc = cond.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  const Strides out_strides = contiguous_strides(out.shape());
  for_each_row<4>(out.shape(), {&cond.strides(), &a.strides(), &b.strides(), &out_strides}, kGrainCheap,
                  [&](const auto& off, std::int64_t n, const auto& inner) {
                    for (std::int64_t i = 0; i < n; ++i)
                      po[off[3] + i] = pc[off[0] + i * inner[0]] != T(0) ? pa[off[1] + i * inner[1]]
                                                                          : pb[off[2] + i * inner[2]];
                  });
}

template <class T>
void unary_forward_kernel(UnaryOp op, const Tensor& x, Tensor& y, double alpha) {
  const T* px = x.data<T>();
  T* py = y.data<T>();
  const std::int64_t grain = is_heavy(op) ? kGrainHeavy : kGrainCheap;
  parallel_for(x.numel(), grain, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      unary_contiguous_f32(op, px + begin, py + begin, end - begin, static_cast<float>(alpha));
    } else {
      for (std::int64_t i = begin; i < end; ++i) py[i] = apply_unary<T>(op, px[i], static_cast<T>(alpha));
    }
  });
}

template <class T>
void unary_backward_kernel(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                           double alpha) {
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  parallel_for(x.numel(), kGrainHeavy, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      unary_backward_contiguous_f32(op, px + begin, py + begin, pdy + begin, pdx + begin, end - begin,
                                    static_cast<float>(alpha));
    } else {
      for (std::int64_t i = begin; i < end; ++i)
        pdx[i] = apply_unary_backward<T>(op, px[i], py[i], pdy[i], static_cast<T>(alpha));
    }
  });
}

DARK_REGISTER_KERNEL(binary, cpu, f32, binary_kernel<float>);
DARK_REGISTER_KERNEL(binary, cpu, f64, binary_kernel<double>);
DARK_REGISTER_KERNEL(binary, cpu, i32, binary_kernel<std::int32_t>);
DARK_REGISTER_KERNEL(binary, cpu, i64, binary_kernel<std::int64_t>);
DARK_REGISTER_KERNEL(where, cpu, f32, where_kernel<float>);
DARK_REGISTER_KERNEL(where, cpu, f64, where_kernel<double>);
DARK_REGISTER_KERNEL(where, cpu, i32, where_kernel<std::int32_t>);
DARK_REGISTER_KERNEL(where, cpu, i64, where_kernel<std::int64_t>);
DARK_REGISTER_KERNEL(unary_forward, cpu, f32, unary_forward_kernel<float>);
DARK_REGISTER_KERNEL(unary_forward, cpu, f64, unary_forward_kernel<double>);
DARK_REGISTER_KERNEL(unary_backward, cpu, f32, unary_backward_kernel<float>);
DARK_REGISTER_KERNEL(unary_backward, cpu, f64, unary_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
