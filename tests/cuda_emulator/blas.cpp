// The emulator's cuBLAS subset (see cublas.h).
#include "cuda_emulator/cublas.h"

#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/bfloat16.h"
#include "cuda_emulator/control.h"
#include "cuda_emulator/memory.h"

struct cublasContext {
  cudaStream_t stream = nullptr;  // cublasSetStream's; the legacy stream until then
  bool own_workspace = false;     // cublasSetWorkspace's; reset by cublasSetStream, as cuBLAS does
};

namespace {
std::atomic<std::uint64_t> gemms_without_a_set_workspace{0};
}  // namespace

namespace dark::cuda_emu {
std::uint64_t gemms_on_cublas_workspace() { return gemms_without_a_set_workspace; }
}  // namespace dark::cuda_emu

namespace {

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; }

// Column-major C (m x n) = alpha op(A) op(B) + beta C is row-major C^T (n x m) =
// alpha op(B)^T op(A)^T + beta C^T: oneDNN's row-major sgemm with the operands swapped.
cublasStatus_t sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float* a,
                     int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const char opb = tb == CUBLAS_OP_N ? 'N' : 'T', opa = ta == CUBLAS_OP_N ? 'N' : 'T';
  return dnnl_sgemm(opb, opa, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc) == dnnl_success
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

// op(X)[i, p] of a column-major matrix with leading dimension ld.
template <class T>
T at(const T* x, cublasOperation_t op, int ld, int i, int p) {
  return op == CUBLAS_OP_N ? x[i + static_cast<long long>(p) * ld] : x[p + static_cast<long long>(i) * ld];
}

// Widens `rows` x `cols` column-major bf16 (leading dimension ld) to float, same layout.
std::vector<float> widen(const dark::BFloat16* x, int rows, int cols, int ld) {
  std::vector<float> out(static_cast<std::size_t>(ld) * (cols > 0 ? cols - 1 : 0) + rows);
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) out[i + static_cast<std::size_t>(j) * ld] = static_cast<float>(x[i + static_cast<long long>(j) * ld]);
  return out;
}

// Runs a gemm on the handle's stream: now, or recorded into a graph capture (the scalars
// alpha and beta are read at the call, as cuBLAS reads host scalars). A gemm on the legacy
// stream during a capture fails, as the capture then does.
cublasStatus_t on_stream(cublasHandle_t handle, std::function<cublasStatus_t()> gemm) {
  if (!handle->own_workspace) ++gemms_without_a_set_workspace;
  auto status = std::make_shared<cublasStatus_t>(CUBLAS_STATUS_SUCCESS);  // what a gemm run now returned
  const cudaError_t e = dark::cuda_emu::run_or_record(handle->stream, [gemm = std::move(gemm), status] {
    *status = gemm();
    return *status == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorLaunchFailure;
  });
  if (e == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
  return *status != CUBLAS_STATUS_SUCCESS ? *status : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  handle->own_workspace = false;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, std::size_t bytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr && bytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
  handle->own_workspace = bytes != 0;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                         int n, int k, const float* alpha, const float* a, int lda, long long stride_a,
                                         const float* b, int ldb, long long stride_b, const float* beta, float* c, int ldc,
                                         long long stride_c, int batch) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  return on_stream(handle, [=, al = *alpha, be = *beta] {
    dark::cuda_emu::DeviceAccess access;
    for (int i = 0; i < batch; ++i) {
      const cublasStatus_t s =
          sgemm(transa, transb, m, n, k, al, a + i * stride_a, lda, b + i * stride_b, ldb, be, c + i * stride_c, ldc);
      if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                         int n, int k, const double* alpha, const double* a, int lda, long long stride_a,
                                         const double* b, int ldb, long long stride_b, const double* beta, double* c,
                                         int ldc, long long stride_c, int batch) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  return on_stream(handle, [=, al = *alpha, be = *beta] {
    dark::cuda_emu::DeviceAccess access;
    for (int bi = 0; bi < batch; ++bi) {
      const double* ab = a + bi * stride_a;
      const double* bb = b + bi * stride_b;
      double* cb = c + bi * stride_c;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          double acc = 0;
          for (int p = 0; p < k; ++p) acc += at(ab, transa, lda, i, p) * at(bb, transb, ldb, p, j);
          double& out = cb[i + static_cast<long long>(j) * ldc];
          out = al * acc + (be == 0 ? 0.0 : be * out);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* a, cudaDataType a_type,
                                          int lda, long long stride_a, const void* b, cudaDataType b_type, int ldb,
                                          long long stride_b, const void* beta, void* c, cudaDataType c_type, int ldc,
                                          long long stride_c, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (compute != CUBLAS_COMPUTE_32F || a_type != b_type || (a_type != CUDA_R_16BF && a_type != CUDA_R_32F) ||
      (c_type != CUDA_R_16BF && c_type != CUDA_R_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  return on_stream(handle, [=] {
    dark::cuda_emu::DeviceAccess access;
    const int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
    const int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
    for (int i = 0; i < batch; ++i) {
      std::vector<float> wa, wb, wc;
      const float *fa, *fb;
      if (a_type == CUDA_R_16BF) {
        wa = widen(static_cast<const dark::BFloat16*>(a) + i * stride_a, a_rows, a_cols, lda);
        wb = widen(static_cast<const dark::BFloat16*>(b) + i * stride_b, b_rows, b_cols, ldb);
        fa = wa.data(), fb = wb.data();
      } else {
        fa = static_cast<const float*>(a) + i * stride_a, fb = static_cast<const float*>(b) + i * stride_b;
      }
      if (c_type == CUDA_R_32F) {
        const cublasStatus_t s =
            sgemm(transa, transb, m, n, k, al, fa, lda, fb, ldb, be, static_cast<float*>(c) + i * stride_c, ldc);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
        continue;
      }
      auto* cb = static_cast<dark::BFloat16*>(c) + i * stride_c;
      wc = widen(cb, m, n, ldc);
      const cublasStatus_t s = sgemm(transa, transb, m, n, k, al, fa, lda, fb, ldb, be, wc.data(), ldc);
      if (s != CUBLAS_STATUS_SUCCESS) return s;
      for (int j = 0; j < n; ++j)
        for (int r = 0; r < m; ++r)
          cb[r + static_cast<long long>(j) * ldc] = dark::BFloat16(wc[r + static_cast<std::size_t>(j) * ldc]);
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t status) { return cublasGetStatusName(status); }
