// DARK_HOST_DEVICE marks functions that compile for both the CPU and CUDA kernels
// (Philox, bfloat16 conversion), so both devices produce the same bits.
#pragma once
#if defined(__CUDACC__)
#define DARK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DARK_HOST_DEVICE inline
#endif
