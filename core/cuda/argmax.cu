// argmax for f32, f64 and bf16 over the last axis of x: (rows, n) -> out: (rows) i64, with
// the CPU's rule (std::max_element's comparisons, core/kernels.h): the first index of the
// largest element, NaN never larger, so a NaN is the answer only when it comes first.
// Sequential semantics, computed in parallel: when x[0] is NaN every comparison against it is
// false and the answer is 0; otherwise NaNs never win and the answer is the first index of
// the largest of the other elements. One block per row; each thread keeps the best of its
// strided elements (the first on ties, as it walks forward), then a fixed tree combines them
// preferring the larger value and, on ties, the smaller index.
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

constexpr int kArgmaxThreads = 256;

template <class K>
struct Candidate {
  K value;
  std::int64_t index;  // -1: none yet
};

template <class K>
__device__ __forceinline__ Candidate<K> better(Candidate<K> a, Candidate<K> b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  if (a.value > b.value) return a;
  if (b.value > a.value) return b;
  return a.index < b.index ? a : b;
}

template <class T>
__global__ void argmax_kernel(const T* x, std::int64_t* out, std::int64_t rows, std::int64_t n) {
  using K = acc_t<T>;
  __shared__ K values[kArgmaxThreads];
  __shared__ std::int64_t indices[kArgmaxThreads];
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    Candidate<K> best{K(0), -1};
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const K v = load(xr, j);
      if (v != v) continue;  // NaN: never larger
      if (best.index < 0 || v > best.value) best = {v, j};
    }
    values[threadIdx.x] = best.value;
    indices[threadIdx.x] = best.index;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
      if (static_cast<int>(threadIdx.x) < half) {
        const Candidate<K> c = better(Candidate<K>{values[threadIdx.x], indices[threadIdx.x]},
                                      Candidate<K>{values[threadIdx.x + half], indices[threadIdx.x + half]});
        values[threadIdx.x] = c.value;
        indices[threadIdx.x] = c.index;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const K first = load(xr, 0);
      out[row] = (first != first || indices[0] < 0) ? 0 : indices[0];
    }
    __syncthreads();  // the next row reuses values / indices
  }
}

template <class T>
void argmax(const Tensor& x, Tensor& out) {
  check_dtype<T>("argmax", {{"x", &x}});
  DARK_CHECK(out.dtype() == DType::i64 && x.is_contiguous(), "argmax: x ", x.describe(), " must be contiguous and out ",
             out.describe(), " i64");
  const std::int64_t n = x.dim() == 0 ? 1 : x.size(static_cast<std::int64_t>(x.dim()) - 1);
  const std::int64_t rows = n > 0 ? x.numel() / n : 0;
  if (rows == 0) return;
  DeviceGuard guard(x);
  launch(argmax_kernel<T>, {grid_for(rows, 1), kArgmaxThreads}, x.data<T>(), out.data<std::int64_t>(), rows, n);
}

DARK_REGISTER_KERNEL(argmax, cuda, f32, &argmax<float>);
DARK_REGISTER_KERNEL(argmax, cuda, f64, &argmax<double>);
DARK_REGISTER_KERNEL(argmax, cuda, bf16, &argmax<BFloat16>);

}  // namespace
}  // namespace dark::cuda
