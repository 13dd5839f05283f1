// Row-major tile products for the fused CPU kernels (flash and linear attention):
// C = alpha * op(A) op(B) + beta * C with op = transpose for 'T'. float32 goes to oneDNN's
// sgemm; float64 (used for gradchecks) is a plain loop. Returns false when oneDNN fails.
#pragma once
#include <oneapi/dnnl/dnnl.h>

#include <cstdint>

namespace dark::cpu {

inline bool gemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return true;
  return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == dnnl_success;
}

inline bool gemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                 std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p)
        acc += (ta == 'T' ? a[p * lda + i] : a[i * lda + p]) * (tb == 'T' ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = alpha * acc + (beta == 0 ? 0.0 : beta * c[i * ldc + j]);
    }
  return true;
}

}  // namespace dark::cpu
