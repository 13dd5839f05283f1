// Asynchronous global-to-shared copies (cp.async, sm_80+): a block issues the loads of the
// next tile, computes on the current one, and waits only when it needs the data. The
// emulator copies at once (it has no asynchrony to model), so there a missing wait cannot
// show; on a GPU it reads stale shared memory.
#pragma once
#include <cstdint>

#include "core/cuda/launch.cuh"

namespace dark::cuda::async {

// 16 bytes from src to dst (shared memory), or 16 zero bytes when !valid (src is not read
// then, but must still be a valid address). Both 16-byte aligned.
__device__ __forceinline__ void copy_16(void* dst, const void* src, bool valid) {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::copy_async_16(dst, src, valid);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(valid ? 16 : 0));
#else
  __trap();
#endif
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void commit() {
#if !defined(DARK_CUDA_EMULATOR) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most kPending committed groups are still in flight (then a barrier makes
// every thread's copies visible to the block).
template <int kPending>
__device__ __forceinline__ void wait() {
#if !defined(DARK_CUDA_EMULATOR) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

}  // namespace dark::cuda::async
