// Deterministic warp- and block-wide reductions for the row kernels (reduce.cu,
// softmax.cu): a fixed tree of warp shuffles, then one warp over the per-warp results. The
// order depends only on blockDim.x (a multiple of 32, at most 1024), so the same launch
// gives the same bits. Every thread of the group must call, and all receive the result.
#pragma once
#include <cmath>
#include <limits>

#include "core/cuda/runtime.cuh"

namespace dark::cuda {

struct SumOp {
  template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
  template <class A> static __device__ __forceinline__ A identity() { return A(0); }
};
// max / min propagate NaN (as torch.max does).
struct MaxOp {
  template <class A> __device__ __forceinline__ A operator()(A a, A b) const {
    return (a > b || a != a) ? a : b;
  }
  template <class A> static __device__ __forceinline__ A identity() {
    return -std::numeric_limits<A>::infinity();
  }
};
struct MinOp {
  template <class A> __device__ __forceinline__ A operator()(A a, A b) const {
    return (a < b || a != a) ? a : b;
  }
  template <class A> static __device__ __forceinline__ A identity() {
    return std::numeric_limits<A>::infinity();
  }
};

template <class A, class Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int delta = 16; delta > 0; delta >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, delta));
  return v;
}

template <class A, class Op>
__device__ A block_reduce(A v, Op op) {
  __shared__ A partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // the previous call's readers of partial[0] are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    v = lane < warps ? partial[lane] : Op::template identity<A>();
    v = warp_reduce(v, op);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  return partial[0];
}

// A group of threads that reduces one row together: a warp or a whole block. rank() and
// size() stride the row; reduce() gives every member the result.
struct WarpGroup {
  __device__ int rank() const { return threadIdx.x & 31; }
  __device__ int size() const { return 32; }
  template <class A, class Op> __device__ A reduce(A v, Op op) const {
    return __shfl_sync(0xffffffffu, warp_reduce(v, op), 0);
  }
};
struct BlockGroup {
  __device__ int rank() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  template <class A, class Op> __device__ A reduce(A v, Op op) const { return block_reduce(v, op); }
};

// False for +-inf and NaN.
template <class A> __device__ __forceinline__ bool finite(A v) { return v - v == A(0); }

}  // namespace dark::cuda
