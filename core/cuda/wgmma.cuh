// Hopper's warpgroup products (wgmma, sm_90a) and the shared-memory layout they read: the
// building blocks of core/cuda/flash_attention_sm90.cu.
//
// A warpgroup (four consecutive warps, 128 threads) computes D (64 x N, f32) += A (64 x 16)
// B (16 x N) with one asynchronous instruction: B always, A optionally, read straight from
// shared memory by the tensor cores, described by a 64-bit matrix descriptor. The
// accumulator lives in registers in the m16n8 C-fragment layout of tile_mma.cuh repeated over
// the N / 8 column tiles, warp w of the group owning rows 16 w .. 16 w + 15: so d[j][i] is the
// C fragment of column tile j, and the A operand in registers is the m16n8k16 A fragment of
// the warp's 16 rows (tile_mma.cuh's conventions hold unchanged per warp).
//
// Shared-memory operands use the 128-byte swizzle, the layout TMA writes and the one that
// reads without bank conflicts: a tile of R rows x C bf16 columns (C a multiple of 64) is
// stored as C / 64 column blocks of R rows of 128 bytes, each block 1024-byte aligned, and the
// 16-byte piece p (0..7) of row r sits at piece p ^ (r % 8) of its row (swizzled_offset).
// The same bytes serve as a K-major operand (rows are M or N, as Q and K for Q K^T) and as an
// MN-major one (rows are K, as V for P V).
//
// Order of operations (PTX ISA): fence() before the first product that reads registers
// written since the last one; commit() closes a group of issued products; wait<n>() blocks
// until at most n groups are in flight; only then may the accumulators be read (the compiler
// is held to that with hold()). Shared memory written by threads (st.shared, cp.async) must be
// made visible to the tensor cores' proxy with fence_shared_writes() before the barrier that
// precedes the products that read it.
// On the CUDA emulator the products run when waited for (tests/cuda_emulator/wgmma.h), so a
// missing wait or an operand overwritten too early shows as a wrong result.
#pragma once
#include <cstdint>

#include "core/cuda/async_copy.cuh"
#include "core/cuda/launch.cuh"

namespace dark::cuda::wgmma {

// The byte offset of element (r, c) in a swizzled tile of `rows` rows (rows % 8 == 0).
__device__ __forceinline__ std::uint32_t swizzled_offset(int r, int c, int rows) {
  return static_cast<std::uint32_t>((c / 64) * rows * 128 + r * 128 + ((((c % 64) / 8) ^ (r % 8)) * 16) + (c % 8) * 2);
}

// Rows [0, kRows) of a (rows, D) bf16 matrix (row r at src + r * row_stride, 16-byte
// aligned) into a swizzled tile at dst (1024-byte aligned), 16 bytes per cp.async by kThreads
// threads, of which the caller is number `thread`; zeros past rows_left rows and d columns.
// Each thread copies one 16-byte column piece of every (kThreads / (kD / 8))-th row, so its
// addresses advance by constant steps (few registers: the loader of a warp-specialised kernel
// has 24-40). The caller commits and waits.
template <int kD, int kRows, int kThreads>
__device__ __forceinline__ void load_swizzled(int thread, unsigned char* dst, const BFloat16* src,
                                              std::int64_t row_stride, int rows_left, int d) {
  constexpr int kPieces = kD / 8, kRowStep = kThreads / kPieces;
  static_assert(kThreads % kPieces == 0 && kRows % kRowStep == 0, "load_swizzled: rows split unevenly");
  const int c = thread % kPieces * 8;
  const bool column_valid = c < d;
  const BFloat16* from = src + (thread / kPieces) * row_stride + c;
#pragma unroll 1
  for (int r = thread / kPieces; r < kRows; r += kRowStep, from += kRowStep * row_stride) {
    const bool valid = column_valid && r < rows_left;
    async::copy_16(dst + swizzled_offset(r, c, kRows), valid ? from : src, valid);
  }
}

// The shared-memory address of p: the space descriptors and the swizzle work in.
__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
#if defined(DARK_CUDA_EMULATOR)
  return ::dark::cuda_emu::shared_address(p);
#else
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
#endif
}

// The descriptor of an operand in a swizzled tile starting at shared address `start` (its
// 1024-byte pattern starts at a 1024-byte boundary): `lbo` bytes between 64-column blocks of
// an MN-major operand (unused for K-major ones), `sbo` bytes between groups of 8 rows.
__device__ __forceinline__ std::uint64_t descriptor(std::uint32_t start, std::uint32_t lbo, std::uint32_t sbo) {
  return static_cast<std::uint64_t>((start & 0x3ffff) >> 4) | static_cast<std::uint64_t>((lbo & 0x3ffff) >> 4) << 16 |
         static_cast<std::uint64_t>((sbo & 0x3ffff) >> 4) << 32 | std::uint64_t{1} << 62;  // mode 1: 128-byte swizzle
}

// Operands in a swizzled tile of `rows` rows at shared address `tile` (1024-byte aligned):
// K-major, the 16 columns from kk of rows row0 .. row0 + 63 or + N - 1 (row0 a multiple of 8;
// 8 rows of 128 bytes are 1024 bytes apart), as Q or K in Q K^T; MN-major, the 16 rows from
// k0 (a multiple of 8), as V in P V (its 64-column blocks `rows` rows apart).
__device__ __forceinline__ std::uint64_t kmajor(std::uint32_t tile, int rows, int row0, int kk) {
  return descriptor(tile + (kk / 64) * rows * 128 + row0 * 128 + (kk % 64) * 2, 16, 1024);
}
__device__ __forceinline__ std::uint64_t mnmajor(std::uint32_t tile, int rows, int k0) {
  return descriptor(tile + k0 * 128, rows * 128, 1024);
}

__device__ __forceinline__ void fence() {
#if !defined(DARK_CUDA_EMULATOR) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void commit() {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::async_commit();
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int kPending>
__device__ __forceinline__ void wait() {
#if defined(DARK_CUDA_EMULATOR)
  ::dark::cuda_emu::wgmma_wait(kPending);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Makes this thread's writes to shared memory visible to the tensor cores' reads.
__device__ __forceinline__ void fence_shared_writes() {
#if !defined(DARK_CUDA_EMULATOR) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Pins registers the products read or write at this point of the instruction stream: the
// compiler may not move their computation past a fence() that follows (the products would
// read stale values) or their use before a wait() that precedes (the products write them
// behind its back).
template <int kTiles>
__device__ __forceinline__ void hold(float (&d)[kTiles][4]) {
#if !defined(DARK_CUDA_EMULATOR)
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[j][i])::"memory");
#endif
}
template <int kTiles>
__device__ __forceinline__ void hold(std::uint32_t (&a)[kTiles][4]) {
#if !defined(DARK_CUDA_EMULATOR)
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[j][i])::"memory");
#endif
}

// d (+)= A B for the warpgroup, m64nNk16, bf16 in, f32 accumulators; accumulate = false
// overwrites d. mma_ss: A K-major in shared memory (descriptor a); mma_rs: A in registers (the
// warp's A fragment). B: K-major for mma_ss, MN-major for mma_rs (the two uses of
// flash_attention_sm90.cu: Q K^T and P V). Issued only: see wait().
template <int kN>
__device__ __forceinline__ void mma_ss(float (&d)[kN / 8][4], std::uint64_t a, std::uint64_t b, bool accumulate);
template <int kN>
__device__ __forceinline__ void mma_rs(float (&d)[kN / 8][4], const std::uint32_t (&a)[4], std::uint64_t b,
                                       bool accumulate);

#if defined(DARK_CUDA_EMULATOR)
template <int kN>
__device__ __forceinline__ void mma_ss(float (&d)[kN / 8][4], std::uint64_t a, std::uint64_t b, bool accumulate) {
  ::dark::cuda_emu::wgmma_bf16(&d[0][0], kN, a, nullptr, b, false, accumulate);
}
template <int kN>
__device__ __forceinline__ void mma_rs(float (&d)[kN / 8][4], const std::uint32_t (&a)[4], std::uint64_t b,
                                       bool accumulate) {
  ::dark::cuda_emu::wgmma_bf16(&d[0][0], kN, 0, a, b, true, accumulate);
}
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One specialisation per N the kernels use. The accumulator is N / 2 "+f" operands
// %0 .. %(N / 2 - 1), then come A (a descriptor, or four registers), B's descriptor and the
// scale-d flag; the macros below spell out the shared operand lists once.
#define DARK_WGMMA_TILE(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define DARK_WGMMA_TILES_4(j) DARK_WGMMA_TILE(j), DARK_WGMMA_TILE(j + 1), DARK_WGMMA_TILE(j + 2), DARK_WGMMA_TILE(j + 3)
#define DARK_WGMMA_TILES_8(j) DARK_WGMMA_TILES_4(j), DARK_WGMMA_TILES_4(j + 4)
#define DARK_WGMMA_TILES_16(j) DARK_WGMMA_TILES_8(j), DARK_WGMMA_TILES_8(j + 8)
#define DARK_WGMMA_TILES_32(j) DARK_WGMMA_TILES_16(j), DARK_WGMMA_TILES_16(j + 16)
#define DARK_WGMMA_REGS_16 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define DARK_WGMMA_REGS_32 \
  DARK_WGMMA_REGS_16 ", " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define DARK_WGMMA_REGS_64 \
  DARK_WGMMA_REGS_32 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, " \
  "%51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define DARK_WGMMA_REGS_128 \
  DARK_WGMMA_REGS_64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, " \
  "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, " \
  "%101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, " \
  "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// The scale-d predicate p from operand n (false: D = A B).
#define DARK_WGMMA_SCALE_D(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"
template <>
__device__ __forceinline__ void mma_ss<32>(float (&d)[32 / 8][4], std::uint64_t a, std::uint64_t b, bool accumulate) {
  asm volatile(DARK_WGMMA_SCALE_D(18) "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" DARK_WGMMA_REGS_16
               "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
               : DARK_WGMMA_TILES_4(0)
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}
template <>
__device__ __forceinline__ void mma_ss<64>(float (&d)[64 / 8][4], std::uint64_t a, std::uint64_t b, bool accumulate) {
  asm volatile(DARK_WGMMA_SCALE_D(34) "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" DARK_WGMMA_REGS_32
               "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : DARK_WGMMA_TILES_8(0)
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}
template <>
__device__ __forceinline__ void mma_ss<128>(float (&d)[128 / 8][4], std::uint64_t a, std::uint64_t b, bool accumulate) {
  asm volatile(DARK_WGMMA_SCALE_D(66) "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" DARK_WGMMA_REGS_64
               "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : DARK_WGMMA_TILES_16(0)
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}
template <>
__device__ __forceinline__ void mma_rs<64>(float (&d)[64 / 8][4], const std::uint32_t (&a)[4], std::uint64_t b,
                                            bool accumulate) {
  asm volatile(DARK_WGMMA_SCALE_D(37) "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" DARK_WGMMA_REGS_32
               "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
               : DARK_WGMMA_TILES_8(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
}
template <>
__device__ __forceinline__ void mma_rs<128>(float (&d)[128 / 8][4], const std::uint32_t (&a)[4], std::uint64_t b,
                                            bool accumulate) {
  asm volatile(DARK_WGMMA_SCALE_D(69) "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" DARK_WGMMA_REGS_64
               "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
               : DARK_WGMMA_TILES_16(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
}
template <>
__device__ __forceinline__ void mma_rs<256>(float (&d)[256 / 8][4], const std::uint32_t (&a)[4], std::uint64_t b,
                                            bool accumulate) {
  asm volatile(DARK_WGMMA_SCALE_D(133) "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" DARK_WGMMA_REGS_128
               "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
               : DARK_WGMMA_TILES_32(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
}
#undef DARK_WGMMA_SCALE_D
#undef DARK_WGMMA_REGS_128
#undef DARK_WGMMA_REGS_64
#undef DARK_WGMMA_REGS_32
#undef DARK_WGMMA_REGS_16
#undef DARK_WGMMA_TILES_32
#undef DARK_WGMMA_TILES_16
#undef DARK_WGMMA_TILES_8
#undef DARK_WGMMA_TILES_4
#undef DARK_WGMMA_TILE
#else
// Compiled for a GPU without wgmma (or the host pass): never launched there (the host picks
// the mma.sync kernels), but defined so that the kernels compile.
template <int kN>
__device__ __forceinline__ void mma_ss(float (&)[kN / 8][4], std::uint64_t, std::uint64_t, bool) {
#if defined(__CUDA_ARCH__)
  __trap();
#endif
}
template <int kN>
__device__ __forceinline__ void mma_rs(float (&)[kN / 8][4], const std::uint32_t (&)[4], std::uint64_t, bool) {
#if defined(__CUDA_ARCH__)
  __trap();
#endif
}
#endif

}  // namespace dark::cuda::wgmma
