// Hopper's warpgroup products (wgmma.mma_async, sm_90a) for the emulated CUDA sources
// (core/cuda/wgmma.cuh calls these under DARK_CUDA_EMULATOR), as the PTX ISA defines them
// ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"):
//   - D (64 x N, f32) = A (64 x 16) B (16 x N) (+ D), bf16 operands, for a warpgroup of four
//     consecutive warps (warp w of it owns rows 16 w .. 16 w + 15);
//   - D in registers, in the m16n8 C-fragment layout repeated over the N / 8 column tiles:
//     d[4 j + i] is row g (+ 8 for i >= 2), column 8 j + 2 t + (i & 1) (g = lane / 4, t = lane % 4);
//   - A in registers (the m16n8k16 A-fragment layout of the warp's 16 rows) or in shared
//     memory, B in shared memory, each described by a 64-bit matrix descriptor: start address,
//     leading and stride byte offsets (LBO, SBO), swizzle mode. Only the 128-byte swizzle is
//     emulated (the only one our kernels use); others are a fault, as is a base offset.
//   - K-major operand (row mn holds its 16 k values): byte start + (mn % 8) 128 + (mn / 8) SBO
//     + 2 k; MN-major operand (row k holds the mn values): start + 2 (mn % 64) + (mn / 64) LBO
//     + (k % 8) 128 + (k / 8) SBO; then the swizzle: address bits 4-6 XOR bits 7-9.
// The product is issued, not done: it runs when the thread waits for its group (grid.h's
// async_issue), reading shared memory and the A registers (of every lane of the warp) then,
// as the tensor cores may.
#pragma once
#include <cstdint>

#include "cuda_emulator/control.h"

namespace dark::cuda_emu {

// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 with D = d[0 .. n / 2). a_regs: the
// calling lane's four A registers, or nullptr for A in shared memory (K-major) at a_desc.
// b_mn_major: the transposed B (imm-trans-b = 1). accumulate: false gives D = A B.
DARK_EMULATOR_API void wgmma_bf16(float* d, int n, std::uint64_t a_desc, const std::uint32_t* a_regs,
                                  std::uint64_t b_desc, bool b_mn_major, bool accumulate);
// wgmma.wait_group.sync.aligned n: runs the calling thread's oldest groups until at most n
// remain (grid.h's async_wait), warp-synchronously: no lane of the warp passes it before every
// lane's products are done (a product reads the A registers of the warp's other lanes).
DARK_EMULATOR_API void wgmma_wait(int pending_groups);
// wgmma instructions issued (per thread) since the process started: which kernels ran.
DARK_EMULATOR_API std::uint64_t wgmma_issued();
// From now on every wgmma product adds `offset` to each element it computes (0, the default:
// none), as a faulty product would: for the tests of what catches wrong Hopper results.
DARK_EMULATOR_API void corrupt_wgmma_products(float offset);

}  // namespace dark::cuda_emu
