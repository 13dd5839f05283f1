// The pieces of a warp-specialised kernel (sm_90a): shared-memory barriers with phases
// (mbarrier), by which the warps that load tiles and those that compute on them hand buffers
// to each other without stopping the whole block, and the register reallocation that gives
// the computing warpgroups the registers the loading one does not need.
//
// A buffer of a pipeline has two barriers: "full", completed when its tile has landed (the
// loading threads' cp.async copies arrive on it as they complete), and "free", completed when
// every computing warp is done reading it. Phases alternate parity: the n-th use of a buffer
// (n = 0, 1, ...) waits for "full" with parity n & 1 and, from the second use on, for the
// previous use's "free" with parity (n - 1) & 1. A wait for a parity passes once the barrier's
// current phase has the other one, so neither side may run more than one phase ahead: the
// pairs of barriers guarantee it.
//
// Data written by cp.async and read by wgmma crosses from the generic proxy to the async one:
// the reading thread runs wgmma::fence_shared_writes() after its wait on "full".
// On the CUDA emulator the barriers live in the same 8 bytes of shared memory
// (tests/cuda_emulator/grid.h); copies are done at once there, so a copy's arrival happens
// when it is issued, and a poll that cannot succeed (every thread of the block waits) fails
// while the emulated clock skips ahead, as time would pass on a GPU.
#pragma once
#include <cstdint>

#include "core/cuda/launch.cuh"

namespace dark::cuda::mbarrier {

#if !defined(DARK_CUDA_EMULATOR)
__device__ __forceinline__ std::uint32_t address(const std::uint64_t* bar) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(bar));
}
#endif

// Sets the barrier up for `count` arrivals per phase; one thread calls it, and a block barrier
// follows before any other thread uses it.
__device__ __forceinline__ void init(std::uint64_t* bar, unsigned count) {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::mbarrier_init(bar, count);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(address(bar)), "r"(count) : "memory");
#else
  (void)bar, (void)count;
  __trap();
#endif
}

// One arrival of the calling thread (release: its earlier memory accesses come first).
__device__ __forceinline__ void arrive(std::uint64_t* bar) {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::mbarrier_arrive(bar);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(address(bar)) : "memory");
#else
  (void)bar;
  __trap();
#endif
}

// One arrival of the calling thread, made when every cp.async it issued so far has landed
// (.noinc: the arrival is one of the `count` the barrier was set up with).
__device__ __forceinline__ void arrive_when_copies_land(std::uint64_t* bar) {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::mbarrier_arrive(bar);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(address(bar)) : "memory");
#else
  (void)bar;
  __trap();
#endif
}

// One poll of the barrier's phase of parity `parity`: true once it has completed (acquire:
// what the arriving threads wrote before their arrival is visible after it). On a GPU a
// failed poll may first suspend the thread for a while (try_wait); the caller loops.
__device__ __forceinline__ bool try_wait(std::uint64_t* bar, unsigned parity) {
#if defined(DARK_CUDA_EMULATOR)
  return ::dark::cuda_emu::mbarrier_try_wait_parity(bar, parity);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  std::uint32_t done = 0;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(address(bar)), "r"(parity)
      : "memory");
  return done != 0;
#else
  (void)bar, (void)parity;
  __trap();
  return false;
#endif
}

// The low 32 bits of the GPU's global nanosecond timer (%globaltimer_lo), for bounding waits
// (intervals up to 4.29 s, by unsigned differences; one register, where the 64-bit timer
// took two in the waits of kernels that have none to spare). On the emulator: the host's
// clock plus the time it skipped while every thread of a block waited, cut to 32 bits.
__device__ __forceinline__ std::uint32_t global_timer_lo() {
#if defined(DARK_CUDA_EMULATOR)
  return static_cast<std::uint32_t>(::dark::cuda_emu::global_timer_ns());
#else
  std::uint32_t ns;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(ns));
  return ns;
#endif
}

// Register reallocation between warpgroups (setmaxnreg): the calling warpgroup gives its
// registers down to kCount, or takes up to kCount from those given. Every warp of the
// warpgroup calls it; kCount is a multiple of 8 in [24, 256]. No-ops on the emulator.
template <int kCount>
__device__ __forceinline__ void shrink_registers() {
  static_assert(kCount % 8 == 0 && kCount >= 24 && kCount <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#if !defined(DARK_CUDA_EMULATOR) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kCount));
#endif
}
template <int kCount>
__device__ __forceinline__ void grow_registers() {
  static_assert(kCount % 8 == 0 && kCount >= 24 && kCount <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#if !defined(DARK_CUDA_EMULATOR) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kCount));
#endif
}

}  // namespace dark::cuda::mbarrier
