// Checks and helpers shared by the op files. Error messages name the op and describe the
// tensors ("add: dtype mismatch: f32[2, 3] cpu vs f64[3] cpu").
#pragma once
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/kernels.h"
#include "core/tensor.h"

namespace dark::ops_detail {

inline void check_defined(const char* op, const Tensor& t) {
  DARK_CHECK(t.defined(), op, ": input tensor is undefined");
}

inline void check_same(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  DARK_CHECK(a.device() == b.device(), op, ": device mismatch: ", a.describe(), " vs ", b.describe());
  DARK_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.describe(), " vs ", b.describe());
}

inline void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t);
  DARK_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor, got ", t.describe());
}

// The attention kernels read a key padding mask as i32 0 / 1 (nonzero of any dtype is a
// real key); undefined stays undefined (no mask).
inline Tensor kernel_key_mask(const Tensor& mask) {
  return mask.defined() ? ne(mask, Tensor::zeros({}, mask.dtype(), mask.device())).to(DType::i32) : Tensor();
}

inline void check_index(const char* op, const Tensor& index) {
  check_defined(op, index);
  DARK_CHECK(index.dtype() == DType::i32 || index.dtype() == DType::i64, op,
             ": indices must be i32 or i64, got ", index.describe());
}

// out = op(a) op(b) + beta out for 2-D a, b and out with unit column strides (out may be f32
// for bf16 a and b: the products' f32 accumulator, unrounded).
inline void gemm_into(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out, float beta) {
  GemmShape s;
  s.m = out.size(0);
  s.n = out.size(1);
  s.k = trans_a ? a.size(0) : a.size(1);
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.lda = a.stride(0);
  s.ldb = b.stride(0);
  s.ldc = out.stride(0);
  s.beta = beta;
  kernels::matmul().get(a.device().type, a.dtype())(a, b, out, s);
}

// Sorted, unique, normalised axes; empty input means every axis.
std::vector<int> normalize_axes(const std::vector<int>& axes, std::size_t ndim, const char* op);

}  // namespace dark::ops_detail
