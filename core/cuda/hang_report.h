// How a kernel that hangs tells the host why before it ends (tile_pipeline.cuh's bounded
// waits): the loading warp that has waited too long packs who it is and what it waited for
// into one 64-bit word, stores it (volatile, then __threadfence_system) in host memory mapped
// into the device, and ends the kernel with __trap(). The host gets a CUDA error (at the next
// synchronising call, or at once on the emulator), and the error's message carries the
// decoded word (take_report, called by DARK_CUDA_CHECK and, on the emulator, by launch()).
// The trap's error is sticky (the context is broken for good), so that message is the last
// thing the process does: cuda_check.h ends it (exit 70).
// Not device printf: vprintf is a function call, and a call in a warp-specialised kernel
// makes ptxas ignore its setmaxnreg and serialise its wgmma products (ptxas C7507, C7510).
// One word, one store: threads that hang at once cannot interleave their reports.
#pragma once
#include <cstdint>
#include <string>

#include "core/cuda/runtime.cuh"

namespace dark::cuda::hang {

// How long a wait may last before it is taken for a hang. A working pipeline waits for
// microseconds (a tile's copies, a warp's products); four seconds is beyond any slowdown
// short of a debugger stopping the kernel, and within what the timer's low 32 bits measure.
inline constexpr std::uint32_t kLimitNanoseconds = 4'000'000'000u;

// The kernels that report hangs, and their pipelines (tile_pipeline.cuh), for the message.
enum Kernel : unsigned { flash_forward = 0, flash_dq = 1, flash_dkv = 2 };

// Who waits: the kernel, its head dimension (64, 128 or 256) and which of its two pipelines
// (0: the block's fixed operands, 1: the streamed tiles), in the word's low 5 bits.
__host__ __device__ constexpr std::uint32_t site(Kernel kernel, int head_dim, int pipeline) {
  return static_cast<std::uint32_t>(kernel) | (head_dim == 64 ? 0u : head_dim == 128 ? 1u : 2u) << 2 |
         static_cast<std::uint32_t>(pipeline) << 4;
}

// The barrier a loader waited for: a buffer to be freed, or every computing warp to finish.
enum Barrier : unsigned { free_barrier = 0, done_barrier = 1 };

// Packs a hang: bit 63 set (a report), bits 0-4 the site, 5 the barrier, 6-7 its stage, 8 the
// phase parity awaited, 9-12 the warp, 13-34 the block's x, 35-48 its y, 49-62 its z (each
// cut to its bits).
__host__ __device__ constexpr std::uint64_t pack(std::uint32_t site, Barrier barrier, int stage, unsigned parity,
                                                 unsigned warp, unsigned block_x, unsigned block_y, unsigned block_z) {
  return std::uint64_t{1} << 63 | site | static_cast<std::uint64_t>(barrier & 1) << 5 |
         static_cast<std::uint64_t>(stage & 3) << 6 | static_cast<std::uint64_t>(parity & 1) << 8 |
         static_cast<std::uint64_t>(warp & 15) << 9 | static_cast<std::uint64_t>(block_x & 0x3fffff) << 13 |
         static_cast<std::uint64_t>(block_y & 0x3fff) << 35 | static_cast<std::uint64_t>(block_z & 0x3fff) << 49;
}

// The word of device `device`'s kernels, in mapped host memory (allocated at the first call,
// kept for the process): the address kernels store to.
std::uint64_t* word(int device);

// The report of a hang since the last call, decoded ("" when none), e.g. "; forward_sm90_kernel<128>,
// K, V tiles: block (0, 0, 0) warp 8 (loading) waited over 4 s for every computing warp to
// finish (mbarrier done, phase parity 0): a computing warp waits forever (a lost arrival, or
// registers that never came) or a release is missing; the kernel ended with __trap()". Reads
// host memory only (no CUDA call: the context may be broken).
std::string take_report();

}  // namespace dark::cuda::hang
