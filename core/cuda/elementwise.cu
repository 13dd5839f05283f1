// Elementwise kernels for f32, f64 and bf16 (bf16 loads to float, computes in float and
// stores rounded to nearest even); binary and where also for i32 and i64, as on the CPU
// (integer arithmetic; pow through double):
//   binary         out = a (op) b; a, b strided with out's shape (stride 0 = broadcast);
//                  comparisons write 1 or 0
//   where          out = cond != 0 ? a : b; cond, a, b strided, all of out's dtype
//   unary_forward  y = f(x), contiguous; alpha is the scalar of add/mul/pow_scalar
//   unary_backward dx = dy * f'(x), contiguous; derivatives that need f(x) read y
// Same formulas as core/cpu/scalar_ops.h. Conventions: relu'(0) = 0, abs'(0) = 0;
// maximum / minimum are a > b ? a : b (a NaN in b propagates, one in a does not);
// d/dx x^alpha is 0 for alpha = 0. Contiguous operands move in 16-byte packs
// (core/cuda/vector_access.cuh).
#include <array>
#include <cstdint>
#include <type_traits>

#include "core/cuda/device_math.cuh"
#include "core/cuda/indexing.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/vector_access.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

// ---------------------------------------------------------------- binary

template <class C>
__device__ __forceinline__ C apply_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::maximum: return a > b ? a : b;
    case BinaryOp::minimum: return a < b ? a : b;
    case BinaryOp::pow:
      if constexpr (std::is_floating_point_v<C>) return dmath::pow(a, b);
      else return static_cast<C>(dmath::pow(static_cast<double>(a), static_cast<double>(b)));
    case BinaryOp::eq: return a == b ? C(1) : C(0);
    case BinaryOp::ne: return a != b ? C(1) : C(0);
    case BinaryOp::lt: return a < b ? C(1) : C(0);
    case BinaryOp::le: return a <= b ? C(1) : C(0);
    case BinaryOp::gt: return a > b ? C(1) : C(0);
    case BinaryOp::ge: return a >= b ? C(1) : C(0);
  }
  return C(0);
}

// Operands of the indexer: 0 = out, 1 = a, 2 = b.
template <class T, bool kContiguous>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, std::int64_t n,
                              StridedIndexer<3> ix) {
  if constexpr (kContiguous) {
    using C = acc_t<T>;
    const auto f = [op](T x, T y, T& z) { z = convert<T>(apply_binary(op, convert<C>(x), convert<C>(y))); };
    for_each_contiguous(n, f, a, b, out);
  } else {
    for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
      std::int64_t off[3];
      ix.offsets(i, off);
      store(out, off[0], apply_binary(op, load(a, off[1]), load(b, off[2])));
    }
  }
}

template <class T>
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  DARK_CHECK(a.shape() == out.shape() && b.shape() == out.shape(), "binary ", binary_op_name(op),
             ": operands ", a.describe(), " and ", b.describe(), " must have the output's shape ",
             out.describe());
  check_dtype<T>("binary", {{"a", &a}, {"b", &b}, {"out", &out}});
  const std::int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  const auto ix = make_indexer<3>("binary", out.shape(), {&out.strides(), &a.strides(), &b.strides()});
  if (ix.contiguous()) {
    launch(binary_kernel<T, true>, {grid_for_packs<T>(n), kThreads}, op, a.data<T>(), b.data<T>(), out.data<T>(), n,
           ix);
  } else {
    launch(binary_kernel<T, false>, {grid_for(n), kThreads}, op, a.data<T>(), b.data<T>(), out.data<T>(), n, ix);
  }
  DARK_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- where

// Operands of the indexer: 0 = out, 1 = cond, 2 = a, 3 = b.
template <class T, bool kContiguous>
__global__ void where_kernel(const T* cond, const T* a, const T* b, T* out, std::int64_t n,
                             StridedIndexer<4> ix) {
  if constexpr (kContiguous) {
    // Packs load both a and b; the strided loop reads only the chosen one.
    const auto f = [](T c, T x, T y, T& z) { z = convert<acc_t<T>>(c) != acc_t<T>(0) ? x : y; };
    for_each_contiguous(n, f, cond, a, b, out);
  } else {
    for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
      std::int64_t off[4];
      ix.offsets(i, off);
      out[off[0]] = load(cond, off[1]) != acc_t<T>(0) ? a[off[2]] : b[off[3]];
    }
  }
}

template <class T>
void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  DARK_CHECK(cond.shape() == out.shape() && a.shape() == out.shape() && b.shape() == out.shape(),
             "where: cond ", cond.describe(), ", a ", a.describe(), " and b ", b.describe(),
             " must have the output's shape ", out.describe());
  check_dtype<T>("where", {{"cond", &cond}, {"a", &a}, {"b", &b}, {"out", &out}});
  const std::int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  const auto ix = make_indexer<4>("where", out.shape(),
                                  {&out.strides(), &cond.strides(), &a.strides(), &b.strides()});
  if (ix.contiguous()) {
    launch(where_kernel<T, true>, {grid_for_packs<T>(n), kThreads}, cond.data<T>(), a.data<T>(), b.data<T>(),
                                                     out.data<T>(), n, ix);
  } else {
    launch(where_kernel<T, false>, {grid_for(n), kThreads}, cond.data<T>(), a.data<T>(), b.data<T>(),
                                                      out.data<T>(), n, ix);
  }
  DARK_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- unary

template <class C> inline constexpr C kSqrt1_2 = C(0.70710678118654752440);     // 1/sqrt(2)
template <class C> inline constexpr C kInvSqrt2Pi = C(0.39894228040143267794);  // 1/sqrt(2 pi)
template <class C> inline constexpr C kSqrt2OverPi = C(0.79788456080286535588); // sqrt(2/pi)
template <class C> inline constexpr C kGeluTanhCubic = C(0.044715);

template <class C>
__device__ __forceinline__ C sigmoid(C x) { return C(1) / (C(1) + dmath::exp(-x)); }

template <class C>
__device__ __forceinline__ C apply_unary(UnaryOp op, C x, C alpha) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return dmath::exp(x);
    case UnaryOp::log: return dmath::log(x);
    case UnaryOp::sqrt: return dmath::sqrt(x);
    case UnaryOp::rsqrt: return C(1) / dmath::sqrt(x);
    case UnaryOp::tanh: return dmath::tanh(x);
    case UnaryOp::sigmoid: return sigmoid(x);
    case UnaryOp::silu: return x * sigmoid(x);
    case UnaryOp::gelu: return C(0.5) * x * dmath::erfc(-x * kSqrt1_2<C>);  // x Phi(x)
    case UnaryOp::gelu_tanh:
      return C(0.5) * x * (C(1) + dmath::tanh(kSqrt2OverPi<C> * (x + kGeluTanhCubic<C> * x * x * x)));
    case UnaryOp::relu: return x > C(0) ? x : C(0);
    case UnaryOp::abs: return dmath::fabs(x);
    case UnaryOp::square: return x * x;
    case UnaryOp::sin: return dmath::sin(x);
    case UnaryOp::cos: return dmath::cos(x);
    case UnaryOp::reciprocal: return C(1) / x;
    case UnaryOp::add_scalar: return x + alpha;
    case UnaryOp::mul_scalar: return x * alpha;
    case UnaryOp::pow_scalar: return alpha == C(2) ? x * x : dmath::pow(x, alpha);
  }
  return C(0);
}

// f'(x) given x and y = f(x).
template <class C>
__device__ __forceinline__ C unary_derivative(UnaryOp op, C x, C y, C alpha) {
  switch (op) {
    case UnaryOp::neg: return C(-1);
    case UnaryOp::exp: return y;
    case UnaryOp::log: return C(1) / x;
    case UnaryOp::sqrt: return C(0.5) / y;
    case UnaryOp::rsqrt: return C(-0.5) * y * y * y;
    case UnaryOp::tanh: return C(1) - y * y;
    case UnaryOp::sigmoid: return y * (C(1) - y);
    case UnaryOp::silu: {
      const C s = sigmoid(x);
      return s * (C(1) + x * (C(1) - s));
    }
    case UnaryOp::gelu: {
      const C cdf = C(0.5) * dmath::erfc(-x * kSqrt1_2<C>);
      const C pdf = kInvSqrt2Pi<C> * dmath::exp(C(-0.5) * x * x);
      return cdf + x * pdf;
    }
    case UnaryOp::gelu_tanh: {
      const C t = dmath::tanh(kSqrt2OverPi<C> * (x + kGeluTanhCubic<C> * x * x * x));
      const C du = kSqrt2OverPi<C> * (C(1) + C(3) * kGeluTanhCubic<C> * x * x);
      return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
    }
    case UnaryOp::relu: return x > C(0) ? C(1) : C(0);
    case UnaryOp::abs: return x > C(0) ? C(1) : (x < C(0) ? C(-1) : C(0));
    case UnaryOp::square: return C(2) * x;
    case UnaryOp::sin: return dmath::cos(x);
    case UnaryOp::cos: return -dmath::sin(x);
    case UnaryOp::reciprocal: return -y * y;
    case UnaryOp::add_scalar: return C(1);
    case UnaryOp::mul_scalar: return alpha;
    case UnaryOp::pow_scalar: return alpha == C(0) ? C(0) : alpha * dmath::pow(x, alpha - C(1));
  }
  return C(0);
}

template <class T>
__global__ void unary_forward_kernel(UnaryOp op, const T* x, T* y, std::int64_t n, acc_t<T> alpha) {
  using C = acc_t<T>;
  for_each_contiguous(n, [op, alpha](T xv, T& yv) { yv = convert<T>(apply_unary(op, convert<C>(xv), alpha)); }, x, y);
}

// y may be null: then f(x) is recomputed where the derivative needs it (and y is not read).
template <class T>
__global__ void unary_backward_kernel(UnaryOp op, const T* x, const T* y, const T* dy, T* dx,
                                      std::int64_t n, acc_t<T> alpha) {
  using C = acc_t<T>;
  const auto dx_of = [op, alpha](C xv, C yv, T dyv) {
    return convert<T>(convert<C>(dyv) * unary_derivative(op, xv, yv, alpha));
  };
  if (y != nullptr) {
    const auto f = [&](T xv, T yv, T dyv, T& dxv) { dxv = dx_of(convert<C>(xv), convert<C>(yv), dyv); };
    for_each_contiguous(n, f, x, y, dy, dx);
  } else {
    const auto f = [&](T xv, T dyv, T& dxv) {
      dxv = dx_of(convert<C>(xv), apply_unary(op, convert<C>(xv), alpha), dyv);
    };
    for_each_contiguous(n, f, x, dy, dx);
  }
}

void check_contiguous(const char* kernel, UnaryOp op, const char* role, const Tensor& t,
                      const Tensor& like) {
  DARK_CHECK(t.is_contiguous(), kernel, " ", unary_op_name(op), ": ", role, " ", t.describe(),
             " is not contiguous");
  DARK_CHECK(t.numel() == like.numel() && t.dtype() == like.dtype(), kernel, " ",
             unary_op_name(op), ": ", role, " ", t.describe(), " does not match ", like.describe());
}

template <class T>
void unary_forward(UnaryOp op, const Tensor& x, Tensor& y, double alpha) {
  check_contiguous("unary_forward", op, "x", x, y);
  check_contiguous("unary_forward", op, "y", y, x);
  const std::int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y);
  launch(unary_forward_kernel<T>, {grid_for_packs<T>(n), kThreads}, op, x.data<T>(), y.data<T>(), n,
                                                     static_cast<acc_t<T>>(alpha));
  DARK_CUDA_CHECK_LAUNCH();
}

template <class T>
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                    double alpha) {
  check_contiguous("unary_backward", op, "x", x, dx);
  check_contiguous("unary_backward", op, "dy", dy, dx);
  check_contiguous("unary_backward", op, "dx", dx, x);
  if (y.defined()) check_contiguous("unary_backward", op, "y", y, dx);
  const std::int64_t n = dx.numel();
  if (n == 0) return;
  DeviceGuard guard(dx);
  launch(unary_backward_kernel<T>, {grid_for_packs<T>(n), kThreads}, op, x.data<T>(),
                                                      y.defined() ? y.data<T>() : nullptr,
                                                      dy.data<T>(), dx.data<T>(), n,
                                                      static_cast<acc_t<T>>(alpha));
  DARK_CUDA_CHECK_LAUNCH();
}

#define DARK_REGISTER_ELEMENTWISE(DTYPE, T)                           \
  DARK_REGISTER_KERNEL(binary, cuda, DTYPE, &binary<T>);              \
  DARK_REGISTER_KERNEL(where, cuda, DTYPE, &where<T>);                \
  DARK_REGISTER_KERNEL(unary_forward, cuda, DTYPE, &unary_forward<T>); \
  DARK_REGISTER_KERNEL(unary_backward, cuda, DTYPE, &unary_backward<T>)
DARK_REGISTER_ELEMENTWISE(f32, float);
DARK_REGISTER_ELEMENTWISE(f64, double);
DARK_REGISTER_ELEMENTWISE(bf16, BFloat16);
#undef DARK_REGISTER_ELEMENTWISE
DARK_REGISTER_KERNEL(binary, cuda, i32, &binary<std::int32_t>);
DARK_REGISTER_KERNEL(binary, cuda, i64, &binary<std::int64_t>);
DARK_REGISTER_KERNEL(where, cuda, i32, &where<std::int32_t>);
DARK_REGISTER_KERNEL(where, cuda, i64, &where<std::int64_t>);

}  // namespace
}  // namespace dark::cuda
