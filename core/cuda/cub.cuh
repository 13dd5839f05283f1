// CUB for the CUDA sources: the toolkit's, or the emulator's subset (see runtime.cuh).
#pragma once
#if defined(DARK_CUDA_EMULATOR)
#include "cuda_emulator/cub.h"
#else
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#endif
