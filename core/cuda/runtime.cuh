// The CUDA runtime, cuBLAS and CUB as the CUDA sources see them: the toolkit's headers when
// nvcc compiles them for a GPU, the emulator's (core/cuda/emulator/) when the host compiler
// compiles them for the CUDA emulator (DARK_CUDA_EMULATOR). Include this, never the
// toolkit's headers directly, from core/cuda/.
#pragma once
#if defined(DARK_CUDA_EMULATOR)
#include "cuda_emulator/cublas.h"
#include "cuda_emulator/runtime.h"
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
// Dynamic shared memory: `DARK_DYNAMIC_SHARED(float, smem);` declares `float* smem`.
#define DARK_DYNAMIC_SHARED(TYPE, NAME)                                   \
  extern __shared__ __align__(16) unsigned char dark_dynamic_shared_[]; \
  TYPE* NAME = reinterpret_cast<TYPE*>(dark_dynamic_shared_)
#endif
