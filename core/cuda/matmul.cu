// matmul with cuBLAS for f32, f64 and bf16 (bf16 inputs, bf16 or f32 output, fp32 compute).
// GemmShape describes row-major matrices: out[b] (m, n) = alpha op(a[b]) (m, k) op(b[b]) (k, n)
// + beta out[b]. cuBLAS is column-major, and a row-major (r, c) matrix with row stride ld
// is the column-major (c, r) matrix with leading dimension ld, its transpose. So we ask
// cuBLAS for out^T (n, m) = op(b)^T (n, k) op(a)^T (k, m): operands swapped, m and n
// swapped, each keeping its own transpose flag. Batch strides may be 0 (broadcast).
// One cuBLAS handle per device, created on first use (thread-safe) and kept for the life
// of the process (destroying it during static destruction can outlive the CUDA runtime);
// each call runs on the thread's current stream (stream.h) like every other kernel. Every
// stream, the legacy one included, gets one workspace of ours (allocated with the handle,
// kept): cuBLAS then allocates nothing inside a graph, and since its choice of algorithm
// depends on the workspace it has, a captured product picks what the eager one picks, so a
// CUDA-graph step gives the eager step's bits.
#include <climits>
#include <cstdint>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

constexpr int kMaxDevices = 64;

// cuBLAS's recommended workspace for Hopper.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

struct Handle {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;  // the stream it was last set to
  void* workspace = nullptr;  // set after every stream change (cublasSetStream resets it)
};

// The handle of the current device (the caller holds a DeviceGuard), set to the thread's
// current stream.
cublasHandle_t handle_for(int device_index) {
  static std::mutex mutex;
  static Handle handles[kMaxDevices] = {};
  DARK_CHECK(device_index >= 0 && device_index < kMaxDevices, "matmul: CUDA device index ",
             device_index, " out of range");
  std::lock_guard lock(mutex);
  Handle& h = handles[device_index];
  if (h.handle == nullptr) {
    DARK_CUBLAS_CHECK(cublasCreate(&h.handle));
    DARK_CUDA_CHECK(cudaMalloc(&h.workspace, kWorkspaceBytes));
    DARK_CUBLAS_CHECK(cublasSetStream(h.handle, h.stream));
    DARK_CUBLAS_CHECK(cublasSetWorkspace(h.handle, h.workspace, kWorkspaceBytes));
    // Default math keeps fp32 gemms in full fp32 (no TF32); bf16 split-K reductions stay
    // in fp32 rather than rounding partial sums to bf16. No atomics: reproducible results.
    DARK_CUBLAS_CHECK(cublasSetMathMode(
        h.handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                            CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    DARK_CUBLAS_CHECK(cublasSetAtomicsMode(h.handle, CUBLAS_ATOMICS_NOT_ALLOWED));
  }
  if (const cudaStream_t stream = current_stream(); stream != h.stream) {
    DARK_CUBLAS_CHECK(cublasSetStream(h.handle, stream));  // which resets the workspace to cuBLAS's own
    DARK_CUBLAS_CHECK(cublasSetWorkspace(h.handle, h.workspace, kWorkspaceBytes));
    h.stream = stream;
  }
  return h.handle;
}

int to_int(std::int64_t v, const char* what, const GemmShape& s) {
  DARK_CHECK(v >= 0 && v <= INT_MAX, "matmul: ", what, " = ", v, " does not fit cuBLAS's int (batch ",
             s.batch, ", m ", s.m, ", n ", s.n, ", k ", s.k, ")");
  return static_cast<int>(v);
}

// Leading dimension for cuBLAS of a row-major (rows, cols) operand with row stride ld:
// at least cols (and 1). With a single row or no columns the stride is never used, so it
// may be anything.
int leading_dim(std::int64_t ld, std::int64_t rows, std::int64_t cols, const char* what,
                const GemmShape& s) {
  const std::int64_t needed = cols > 1 ? cols : 1;
  if ((rows <= 1 || cols == 0) && ld < needed) ld = needed;
  DARK_CHECK(ld >= needed, "matmul: row stride ", what, " = ", ld, " is smaller than the ", cols,
             " columns it spans (m ", s.m, ", n ", s.n, ", k ", s.k, ")");
  return to_int(ld, what, s);
}

struct CublasGemm {
  cublasOperation_t op_first, op_second;  // for b then a (column-major view)
  int m, n, k;                            // cuBLAS's: n, m, k of GemmShape
  int ld_first, ld_second, ld_out;
  long long stride_first, stride_second, stride_out;
  int batch;
};

CublasGemm plan(const Tensor& a, const Tensor& b, const Tensor& out, const GemmShape& s) {
  DARK_CHECK(a.device() == out.device() && b.device() == out.device(), "matmul: a ", a.describe(),
             ", b ", b.describe(), " and out ", out.describe(), " must be on one device");
  DARK_CHECK(s.batch_stride_a >= 0 && s.batch_stride_b >= 0 && s.batch_stride_c >= 0,
             "matmul: negative batch stride");
  CublasGemm g;
  g.op_first = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.op_second = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.m = to_int(s.n, "n", s);
  g.n = to_int(s.m, "m", s);
  g.k = to_int(s.k, "k", s);
  g.batch = to_int(s.batch, "batch", s);
  // Stored row-major shapes: a is (m, k) or (k, m) when transposed; b is (k, n) or (n, k).
  const std::int64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
  const std::int64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
  g.ld_first = leading_dim(s.ldb, b_rows, b_cols, "ldb", s);
  g.ld_second = leading_dim(s.lda, a_rows, a_cols, "lda", s);
  g.ld_out = leading_dim(s.ldc, s.m, s.n, "ldc", s);
  g.stride_first = s.batch_stride_b;
  g.stride_second = s.batch_stride_a;
  g.stride_out = s.batch_stride_c;
  return g;
}

bool empty_output(const GemmShape& s) { return s.batch == 0 || s.m == 0 || s.n == 0; }

void matmul_f32(const Tensor& a, const Tensor& b, Tensor& out, const GemmShape& s) {
  check_dtype<float>("matmul", {{"a", &a}, {"b", &b}, {"out", &out}});
  if (empty_output(s)) return;
  const CublasGemm g = plan(a, b, out, s);
  DeviceGuard guard(out);
  const float alpha = s.alpha, beta = s.beta;
  DARK_CUBLAS_CHECK(cublasSgemmStridedBatched(
      handle_for(out.device().index), g.op_first, g.op_second, g.m, g.n, g.k, &alpha,
      b.data<float>(), g.ld_first, g.stride_first, a.data<float>(), g.ld_second, g.stride_second,
      &beta, out.data<float>(), g.ld_out, g.stride_out, g.batch));
}

void matmul_f64(const Tensor& a, const Tensor& b, Tensor& out, const GemmShape& s) {
  check_dtype<double>("matmul", {{"a", &a}, {"b", &b}, {"out", &out}});
  if (empty_output(s)) return;
  const CublasGemm g = plan(a, b, out, s);
  DeviceGuard guard(out);
  const double alpha = s.alpha, beta = s.beta;
  DARK_CUBLAS_CHECK(cublasDgemmStridedBatched(
      handle_for(out.device().index), g.op_first, g.op_second, g.m, g.n, g.k, &alpha,
      b.data<double>(), g.ld_first, g.stride_first, a.data<double>(), g.ld_second, g.stride_second,
      &beta, out.data<double>(), g.ld_out, g.stride_out, g.batch));
}

// bf16 operands; out bf16, or f32 (kept unrounded: the LM head's logits chunks).
void matmul_bf16(const Tensor& a, const Tensor& b, Tensor& out, const GemmShape& s) {
  check_dtype<BFloat16>("matmul", {{"a", &a}, {"b", &b}});
  DARK_CHECK(out.dtype() == DType::bf16 || out.dtype() == DType::f32, "matmul: out ", out.describe(),
             " must be bf16 or f32 for bf16 operands");
  if (empty_output(s)) return;
  const CublasGemm g = plan(a, b, out, s);
  DeviceGuard guard(out);
  const float alpha = s.alpha, beta = s.beta;  // CUBLAS_COMPUTE_32F takes float scalars
  const bool f32_out = out.dtype() == DType::f32;
  DARK_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle_for(out.device().index), g.op_first, g.op_second, g.m, g.n, g.k, &alpha,
      b.data<BFloat16>(), CUDA_R_16BF, g.ld_first, g.stride_first, a.data<BFloat16>(), CUDA_R_16BF,
      g.ld_second, g.stride_second, &beta, out.raw_data(), f32_out ? CUDA_R_32F : CUDA_R_16BF, g.ld_out,
      g.stride_out, g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

DARK_REGISTER_KERNEL(matmul, cuda, f32, &matmul_f32);
DARK_REGISTER_KERNEL(matmul, cuda, f64, &matmul_f64);
DARK_REGISTER_KERNEL(matmul, cuda, bf16, &matmul_bf16);

}  // namespace
}  // namespace dark::cuda
