// Math functions overloaded on the compute type (float or double), so kernels templated on
// acc_t<T> call the single-precision CUDA functions for f32/bf16 and the double ones for f64.
#pragma once
#include "core/cuda/runtime.cuh"

namespace dark::cuda::dmath {

#define DARK_DMATH_UNARY(NAME, FLOAT_FN, DOUBLE_FN)                                   \
  __device__ __forceinline__ float NAME(float x) { return ::FLOAT_FN(x); }           \
  __device__ __forceinline__ double NAME(double x) { return ::DOUBLE_FN(x); }

DARK_DMATH_UNARY(exp, expf, exp)
DARK_DMATH_UNARY(log, logf, log)
DARK_DMATH_UNARY(sqrt, sqrtf, sqrt)
DARK_DMATH_UNARY(tanh, tanhf, tanh)
DARK_DMATH_UNARY(sin, sinf, sin)
DARK_DMATH_UNARY(cos, cosf, cos)
DARK_DMATH_UNARY(erfc, erfcf, erfc)
DARK_DMATH_UNARY(fabs, fabsf, fabs)
#undef DARK_DMATH_UNARY

__device__ __forceinline__ float pow(float x, float y) { return ::powf(x, y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }

}  // namespace dark::cuda::dmath
