// The tile pipeline of the warp-specialised wgmma kernels (flash_attention_sm90*.cu): one
// warpgroup loads tiles into kStages shared-memory buffers, the computing warpgroups read
// them, and mbarriers (mbarrier.cuh) hand each buffer back and forth, with no block-wide
// barrier after the start.
//   - Tile i lives in buffer i % kStages; it is the buffer's use n = i / kStages.
//   - A tile may come in kParts parts that land separately (the forward's K and V: the
//     products with K start before V has landed); each part has its own "landed" barrier.
//   - The loader waits until buffer i % kStages is free (every computing warp is done with
//     tile i - kStages), issues the part's copies and arrives on the part's "landed" barrier
//     (arrive_when_copies_land: the arrival comes when the copies have landed). A loader that
//     also writes shared memory with plain stores (statistics) arrives once more after them
//     (arrive: release), so "landed" then counts two arrivals per loading thread.
//   - Every computing warp waits for each part it reads, then frees the buffer once its
//     products reading the tile are done (waited for), and frees every tile, also those it
//     skips: a warp that freed tile i without having waited for it could run a phase ahead.
#pragma once
#include <cstdint>

#include "core/cuda/mbarrier.cuh"
#include "core/cuda/wgmma.cuh"

namespace dark::cuda::pipeline {

// A block of two computing warpgroups and a loading one (384 threads) starts with 168
// registers a thread (65536 / 384, rounded down to 8); setmaxnreg then moves what the loader
// gives, 128 (168 - kLoader), to the computing warpgroups, 256 (kCompute - 168). The loader
// keeps its tile addresses without spilling in 40; computing code that needs more than 232
// (dK, dV at d 256) takes 240 and leaves the loader 24 (ptxas -v and scripts/kernel_evidence.py
// show the spills of each choice).
template <int kLoader, int kCompute>
struct RegisterSplit {
  static_assert(128 * (168 - kLoader) >= 2 * 128 * (kCompute - 168),
                "the computing warpgroups take more registers than the loader gives");
  static constexpr int kLoaderRegisters = kLoader, kComputeRegisters = kCompute;
};
using RoomyLoader = RegisterSplit<40, 232>;
using RoomyCompute = RegisterSplit<24, 240>;

template <int kStages, int kParts = 1>
struct TilePipeline {
  std::uint64_t landed[kParts][kStages], free[kStages];

  static __device__ __forceinline__ unsigned use(int i) { return static_cast<unsigned>(i / kStages); }

  // One thread sets the barriers up; a block barrier follows. `landing_arrivals` per part
  // and phase (loading threads, twice for those that also store), `computing_warps` frees.
  __device__ __forceinline__ void init(unsigned landing_arrivals, unsigned computing_warps) {
    for (int s = 0; s < kStages; ++s) {
      for (int p = 0; p < kParts; ++p) mbarrier::init(&landed[p][s], landing_arrivals);
      mbarrier::init(&free[s], computing_warps);
    }
  }

  // Loader: returns once tile i's buffer is free.
  __device__ __forceinline__ void wait_free(int i) {
    if (i >= kStages) mbarrier::wait(&free[i % kStages], (use(i) - 1) & 1);
  }
  // Loader: part p of tile i arrives when the copies issued so far have landed.
  __device__ __forceinline__ void copies_issued(int p, int i) { mbarrier::arrive_when_copies_land(&landed[p][i % kStages]); }
  // Loader: the plain stores of part p of tile i are done.
  __device__ __forceinline__ void stores_done(int p, int i) { mbarrier::arrive(&landed[p][i % kStages]); }

  // Computing warps: returns once part p of tile i has landed, visible to the tensor cores.
  __device__ __forceinline__ void wait_landed(int p, int i) {
    mbarrier::wait(&landed[p][i % kStages], use(i) & 1);
    wgmma::fence_shared_writes();
  }
  // Computing warps: this warp is done with tile i (its products reading it were waited for).
  __device__ __forceinline__ void release(int i) {
    if (threadIdx.x % 32 == 0) mbarrier::arrive(&free[i % kStages]);
  }
};

}  // namespace dark::cuda::pipeline
