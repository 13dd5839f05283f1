// The scalar definitions of the elementwise ops, shared by the CPU kernels. Compute type
// C is float for f32 (vectorisable vmath) and double for f64; integer types use the
// integer operations where they exist.
#pragma once
#include <cmath>
#include <type_traits>

#include "core/cpu/vec_math.h"
#include "core/kernels.h"

namespace dark::cpu {

template <class C>
DARK_INLINE C apply_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::maximum: return a > b ? a : b;
    case BinaryOp::minimum: return a < b ? a : b;
    case BinaryOp::pow:
      if constexpr (std::is_floating_point_v<C>) return std::pow(a, b);
      else return static_cast<C>(std::pow(static_cast<double>(a), static_cast<double>(b)));
    case BinaryOp::eq: return a == b ? C(1) : C(0);
    case BinaryOp::ne: return a != b ? C(1) : C(0);
    case BinaryOp::lt: return a < b ? C(1) : C(0);
    case BinaryOp::le: return a <= b ? C(1) : C(0);
    case BinaryOp::gt: return a > b ? C(1) : C(0);
    case BinaryOp::ge: return a >= b ? C(1) : C(0);
  }
  return C(0);
}

inline constexpr double kSqrtHalf = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluTanhCubic = 0.044715;

template <class C>
DARK_INLINE C apply_unary(UnaryOp op, C x, C alpha) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return vmath::exp(x);
    case UnaryOp::log: return vmath::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::rsqrt: return C(1) / std::sqrt(x);
    case UnaryOp::tanh: return vmath::tanh(x);
    case UnaryOp::sigmoid: return vmath::sigmoid(x);
    case UnaryOp::silu: return x * vmath::sigmoid(x);
    case UnaryOp::gelu: return C(0.5) * x * vmath::erfc(-x * C(kSqrtHalf));
    case UnaryOp::gelu_tanh:
      // 0.5 x (1 + tanh(u)) written as x sigmoid(2u): no cancellation in the negative tail.
      return x * vmath::sigmoid(C(2 * kSqrt2OverPi) * (x + C(kGeluTanhCubic) * x * x * x));
    case UnaryOp::relu: return x > C(0) ? x : C(0);
    case UnaryOp::abs: return std::fabs(x);
    case UnaryOp::square: return x * x;
    case UnaryOp::sin: return std::sin(x);
    case UnaryOp::cos: return std::cos(x);
    case UnaryOp::reciprocal: return C(1) / x;
    case UnaryOp::add_scalar: return x + alpha;
    case UnaryOp::mul_scalar: return x * alpha;
    case UnaryOp::pow_scalar: return alpha == C(2) ? x * x : std::pow(x, alpha);
  }
  return C(0);
}

// dy * f'(x), given y = f(x).
template <class C>
DARK_INLINE C apply_unary_backward(UnaryOp op, C x, C y, C dy, C alpha) {
  switch (op) {
    case UnaryOp::neg: return -dy;
    case UnaryOp::exp: return dy * y;
    case UnaryOp::log: return dy / x;
    case UnaryOp::sqrt: return dy * C(0.5) / y;
    case UnaryOp::rsqrt: return dy * C(-0.5) * y * y * y;
    case UnaryOp::tanh: return dy * (C(1) - y * y);
    case UnaryOp::sigmoid: return dy * y * (C(1) - y);
    case UnaryOp::silu: {
      const C s = vmath::sigmoid(x);
      return dy * s * (C(1) + x * (C(1) - s));
    }
    case UnaryOp::gelu: {
      const C cdf = C(0.5) * vmath::erfc(-x * C(kSqrtHalf));
      const C pdf = C(kInvSqrt2Pi) * vmath::exp(C(-0.5) * x * x);
      return dy * (cdf + x * pdf);
    }
    case UnaryOp::gelu_tanh: {
      // y = x s(2u) with s the sigmoid: y' = s + x s (1 - s) 2u'.
      const C s = vmath::sigmoid(C(2 * kSqrt2OverPi) * (x + C(kGeluTanhCubic) * x * x * x));
      const C du = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluTanhCubic) * x * x);
      return dy * (s + x * s * (C(1) - s) * C(2) * du);
    }
    case UnaryOp::relu: return x > C(0) ? dy : C(0);
    case UnaryOp::abs: return x > C(0) ? dy : (x < C(0) ? -dy : C(0));
    case UnaryOp::square: return dy * C(2) * x;
    case UnaryOp::sin: return dy * std::cos(x);
    case UnaryOp::cos: return -dy * std::sin(x);
    case UnaryOp::reciprocal: return -dy * y * y;
    case UnaryOp::add_scalar: return dy;
    case UnaryOp::mul_scalar: return dy * alpha;
    case UnaryOp::pow_scalar: return dy * alpha * std::pow(x, alpha - C(1));
  }
  return C(0);
}

}  // namespace dark::cpu
