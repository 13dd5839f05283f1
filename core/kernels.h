// The kernel interface between ops (autograd/ops/) and devices (core/cpu/, core/cuda/).
// Each kernel has the same signature on every device; shapes are written as letters.
// Conventions, checked by the ops before dispatch so kernels stay simple:
//   - every tensor passed to a kernel is on one device and has the dispatched dtype,
//     unless a comment says otherwise;
//   - "out" tensors are allocated contiguous by the caller;
//   - "strided" inputs may have any strides (including 0 for broadcast axes) but already
//     have the output's shape.
#pragma once
#include <cstdint>

#include "core/dispatch.h"
#include "core/tensor.h"

namespace dark {

enum class BinaryOp : std::uint8_t {
  add, sub, mul, div, maximum, minimum, pow,
  // comparisons write 1 or 0 in the output dtype
  eq, ne, lt, le, gt, ge,
};

enum class UnaryOp : std::uint8_t {
  neg, exp, log, sqrt, rsqrt, tanh, sigmoid, silu, gelu, gelu_tanh, relu, abs, square, sin,
  cos, reciprocal,
  // with the scalar argument `alpha`:
  add_scalar, mul_scalar, pow_scalar,
};

enum class ReduceOp : std::uint8_t { sum, mean, max, min, logsumexp };

const char* binary_op_name(BinaryOp op);
const char* unary_op_name(UnaryOp op);
const char* reduce_op_name(ReduceOp op);

// One (batched) matrix product out[b] = alpha * op(a[b]) op(b[b]) + beta * out[b], with
// op = transpose when the flag is set. Matrices are row-major with unit column stride;
// lda/ldb/ldc are row strides; batch strides may be 0 (broadcast operand).
struct GemmShape {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
};

DARK_DECLARE_KERNEL(fill, void(Tensor& out, double value))
// dst[i] = src[i] for same-shape, same-dtype tensors with arbitrary strides.
DARK_DECLARE_KERNEL(strided_copy, void(const Tensor& src, Tensor& dst))
// Contiguous dtype conversion; dispatched on src dtype, dst may have any dtype.
DARK_DECLARE_KERNEL(cast, void(const Tensor& src, Tensor& dst))

// out = a (op) b, a and b strided with out's shape.
DARK_DECLARE_KERNEL(binary, void(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out))
// out = cond != 0 ? a : b; all strided with out's shape and out's dtype.
DARK_DECLARE_KERNEL(where, void(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out))
// y = f(x), contiguous. alpha is the scalar of the *_scalar ops.
DARK_DECLARE_KERNEL(unary_forward, void(UnaryOp op, const Tensor& x, Tensor& y, double alpha))
// dx = dy * f'(x); y = f(x) is passed because some derivatives read it. All contiguous.
DARK_DECLARE_KERNEL(unary_backward, void(UnaryOp op, const Tensor& x, const Tensor& y,
                                         const Tensor& dy, Tensor& dx, double alpha))

// x: (outer, n, inner) contiguous -> out: (outer, inner). Reduces the middle axis.
DARK_DECLARE_KERNEL(reduce, void(ReduceOp op, const Tensor& x, Tensor& out, std::int64_t outer,
                                 std::int64_t n, std::int64_t inner))

// Over the last axis of x: (rows, n) contiguous. log=true gives log_softmax.
DARK_DECLARE_KERNEL(softmax_forward, void(const Tensor& x, Tensor& y, bool log))
// dx from the forward output y and upstream dy, all (rows, n) contiguous.
DARK_DECLARE_KERNEL(softmax_backward, void(const Tensor& y, const Tensor& dy, Tensor& dx, bool log))

// See GemmShape. a, b, out are the base tensors whose data() the strides index.
DARK_DECLARE_KERNEL(matmul, void(const Tensor& a, const Tensor& b, Tensor& out, const GemmShape& s))

// x: (outer, n, inner), index: (k) of i32/i64 in [0, n) -> out: (outer, k, inner).
// Dispatched on x's dtype; the index dtype is read from the tensor.
DARK_DECLARE_KERNEL(gather, void(const Tensor& x, const Tensor& index, Tensor& out,
                                 std::int64_t outer, std::int64_t n, std::int64_t inner))
// dx (outer, n, inner) += scatter of dout (outer, k, inner) at index: the backward of gather.
// Deterministic: repeated indices are summed in index order.
DARK_DECLARE_KERNEL(scatter_add, void(const Tensor& dout, const Tensor& index, Tensor& dx,
                                      std::int64_t outer, std::int64_t n, std::int64_t inner))
// Inclusive prefix sums along the middle axis of x: (outer, n, inner); reverse=true sums
// from the end (the backward of cumsum).
DARK_DECLARE_KERNEL(cumsum, void(const Tensor& x, Tensor& out, std::int64_t outer,
                                 std::int64_t n, std::int64_t inner, bool reverse))

// Philox normal / uniform fills of a contiguous tensor: element i uses counter
// (offset + i / 4, stream) under key seed, lane i % 4 (see core/philox.h).
DARK_DECLARE_KERNEL(fill_normal, void(Tensor& out, std::uint64_t seed, std::uint64_t stream,
                                      std::uint64_t offset, double mean, double std))
DARK_DECLARE_KERNEL(fill_uniform, void(Tensor& out, std::uint64_t seed, std::uint64_t stream,
                                       std::uint64_t offset, double low, double high))

}  // namespace dark
