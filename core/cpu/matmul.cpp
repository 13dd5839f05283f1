// CPU matrix products. float32 goes to oneDNN's sgemm (row-major); float64, needed only
// for gradchecks, uses a plain blocked loop.
#include <oneapi/dnnl/dnnl.h>

#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

void matmul_f32(const Tensor& a, const Tensor& b, Tensor& out, const GemmShape& s) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = out.data<float>();
  auto one = [&](std::int64_t batch) {
    const dnnl_status_t status =
        dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.m, s.n, s.k, s.alpha,
                   pa + batch * s.batch_stride_a, s.lda, pb + batch * s.batch_stride_b, s.ldb, s.beta,
                   pc + batch * s.batch_stride_c, s.ldc);
    DARK_CHECK(status == dnnl_success, "matmul: dnnl_sgemm failed with status ", static_cast<int>(status),
               " for m=", s.m, " n=", s.n, " k=", s.k);
  };
  // Many small products: one per thread (sgemm then runs single-threaded inside the
  // parallel region). Large products: sgemm's own threading, one after another.
  const bool small = s.m * s.n * s.k < (1 << 18);
  if (s.batch > 1 && small) {
    parallel_for(s.batch, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) one(i);
    });
  } else {
    for (std::int64_t i = 0; i < s.batch; ++i) one(i);
  }
}

void matmul_f64(const Tensor& a, const Tensor& b, Tensor& out, const GemmShape& s) {
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  double* pc = out.data<double>();
  parallel_for(s.batch * s.m, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t batch = row / s.m, i = row % s.m;
      const double* A = pa + batch * s.batch_stride_a;
      const double* B = pb + batch * s.batch_stride_b;
      double* C = pc + batch * s.batch_stride_c + i * s.ldc;
      for (std::int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (std::int64_t p = 0; p < s.k; ++p) {
          const double av = s.trans_a ? A[p * s.lda + i] : A[i * s.lda + p];
          const double bv = s.trans_b ? B[j * s.ldb + p] : B[p * s.ldb + j];
          acc += av * bv;
        }
        C[j] = s.alpha * acc + (s.beta == 0 ? 0.0 : s.beta * C[j]);
      }
    }
  });
}

DARK_REGISTER_KERNEL(matmul, cpu, f32, matmul_f32);
DARK_REGISTER_KERNEL(matmul, cpu, f64, matmul_f64);

}  // namespace
}  // namespace dark::cpu
