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
//     Lane 0 frees for its warp after a __syncwarp, which orders the other lanes' reads of the
//     buffer (plain loads of statistics) before the release that lets the loader overwrite it.
//   - No hang lasts: the loader's waits are bounded, and its last one is for every computing
//     warp to have finished with the pipeline ("done"), so a computing warp that waits
//     forever (a lost arrival, registers that never came) keeps the loader from its end too.
//     A loader wait that has not completed after hang::kLimitNanoseconds stores who waited
//     for what in the host's hang word and ends the kernel with __trap(): the host gets a
//     CUDA error naming the kernel, block, warp and barrier (hang_report.h) instead of a hung
//     process. The computing warps' own waits stay plain polls: a timer there costs the
//     registers that let their products overlap (ptxas C7512 at d 128 and 256). Nothing in a
//     bounded wait is a function call (a call costs the kernel its setmaxnreg and its wgmma
//     overlap: C7507, C7510), and its hot path is one poll.
#pragma once
#include <cstdint>

#include "core/cuda/hang_report.h"
#include "core/cuda/mbarrier.cuh"
#include "core/cuda/wgmma.cuh"

namespace dark::cuda::pipeline {

// A block of two computing warpgroups and a loading one (384 threads) starts with at most 168
// registers a thread (65536 / 384, rounded down to 8); setmaxnreg then moves what the loader
// gives, 128 (entry - kLoader), to the computing warpgroups, 256 (kCompute - entry). The loader
// keeps its tile addresses without spilling in 40; computing code that needs more than 232
// (dK, dV at d 256) takes 240 and leaves the loader 24 (ptxas -v and scripts/kernel_evidence.py
// show the spills of each choice). Should a kernel start with fewer than kEntryNeeded (another
// ptxas, a -G build, changed launch bounds), setmaxnreg.inc would wait for registers that never
// come: the host reads each kernel's count first and runs the mma.sync kernels instead
// (flash_attention_sm90_guard.h).
template <int kLoader, int kCompute>
struct RegisterSplit {
  static constexpr int kLoaderRegisters = kLoader, kComputeRegisters = kCompute;
  // The fewest registers a thread must start with: 128 (entry - kLoader) >= 256 (kCompute - entry).
  static constexpr int kEntryNeeded = (kLoader + 2 * kCompute + 2) / 3;
  static_assert(kEntryNeeded <= 168, "the computing warpgroups take more registers than the loader gives");
};
using RoomyLoader = RegisterSplit<40, 232>;
using RoomyCompute = RegisterSplit<24, 240>;

template <int kStages, int kParts = 1>
struct TilePipeline {
  std::uint64_t landed[kParts][kStages], free[kStages];
  std::uint64_t done;        // every computing warp has finished with the pipeline
  std::uint64_t* hang_word;  // where a hang is reported (hang::word)
  std::uint32_t site;        // who waits, for that report (hang::site)

  static __device__ __forceinline__ unsigned use(int i) { return static_cast<unsigned>(i / kStages); }

  // One thread sets the barriers up; a block barrier follows. `landing_arrivals` per part
  // and phase (loading threads, twice for those that also store), `computing_warps` frees.
  __device__ __forceinline__ void init(unsigned landing_arrivals, unsigned computing_warps, std::uint32_t hang_site,
                                       std::uint64_t* hang_report_word) {
    for (int s = 0; s < kStages; ++s) {
      for (int p = 0; p < kParts; ++p) mbarrier::init(&landed[p][s], landing_arrivals);
      mbarrier::init(&free[s], computing_warps);
    }
    mbarrier::init(&done, computing_warps);
    site = hang_site;
    hang_word = hang_report_word;
  }

  // Loader: returns once tile i's buffer is free (bounded).
  __device__ __forceinline__ void wait_free(int i) {
    if (i >= kStages) wait_bounded(&free[i % kStages], (use(i) - 1) & 1, hang::free_barrier, i % kStages);
  }
  // Loader: part p of tile i arrives when the copies issued so far have landed.
  __device__ __forceinline__ void copies_issued(int p, int i) { mbarrier::arrive_when_copies_land(&landed[p][i % kStages]); }
  // Loader: the plain stores of part p of tile i are done.
  __device__ __forceinline__ void stores_done(int p, int i) { mbarrier::arrive(&landed[p][i % kStages]); }
  // Loader, last: returns once every computing warp has finished (bounded).
  __device__ __forceinline__ void wait_finished() { wait_bounded(&done, 0, hang::done_barrier, 0); }

  // Computing warps: returns once part p of tile i has landed, visible to the tensor cores.
  __device__ __forceinline__ void wait_landed(int p, int i) {
    while (!mbarrier::try_wait(&landed[p][i % kStages], use(i) & 1)) {
    }
    wgmma::fence_shared_writes();
  }
  // Computing warps: this warp is done with tile i (its products reading it were waited for,
  // and every lane's loads from it are ordered before lane 0's release by the __syncwarp).
  __device__ __forceinline__ void release(int i) { arrive_for_warp(&free[i % kStages]); }
  // Computing warps: this warp is done with the pipeline (after its last release).
  __device__ __forceinline__ void finish() { arrive_for_warp(&done); }

 private:
  __device__ __forceinline__ static void arrive_for_warp(std::uint64_t* bar) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbarrier::arrive(bar);
  }

  // Polls once; on a failure, polls until the phase completes or the hang limit passes.
  __device__ __forceinline__ void wait_bounded(std::uint64_t* bar, unsigned parity, hang::Barrier barrier, int stage) {
    if (mbarrier::try_wait(bar, parity)) return;
    const std::uint32_t start = mbarrier::global_timer_lo();
    while (!mbarrier::try_wait(bar, parity))
      if (mbarrier::global_timer_lo() - start > hang::kLimitNanoseconds) {
        *reinterpret_cast<volatile std::uint64_t*>(hang_word) =
            hang::pack(site, barrier, stage, parity, threadIdx.x / 32, blockIdx.x, blockIdx.y, blockIdx.z);
        __threadfence_system();  // the report reaches the host before the trap ends the kernel
        __trap();
      }
  }
};

}  // namespace dark::cuda::pipeline
