// Grid execution of the CUDA emulator: a kernel launch runs its blocks one after another
// on the launching host thread, each block's threads as fibers (fiber.h) that switch at
// barriers. What CUDA guarantees, the emulator enforces, and what CUDA leaves undefined it
// reports as an error instead of guessing:
//   - __syncthreads waits for every thread of the block that has not exited;
//   - warp-synchronous operations (shuffles, votes, __syncwarp, mma) wait for exactly the
//     lanes of their mask; a mask naming a lane that does not exist or has exited, or a
//     shuffle reading a lane outside the mask, is an error;
//   - a block whose threads all wait for something that cannot happen (a barrier some
//     threads skipped) is an error naming the kernel's block and the barrier, not a hang;
//   - the launch shape is checked as a GPU checks it (at most 1024 threads per block, grid
//     limits, dynamic shared memory beyond 48 KiB only after cudaFuncSetAttribute).
// Kernels run one at a time (one device lock), so __shared__ variables, which the emulator
// compiles as function statics, are shared by the threads of the running block only.
// Exported (tests drive run_grid directly); the CUDA sources reach it through runtime.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "cuda_emulator/control.h"

namespace dark::cuda_emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// The calling emulated thread's coordinates; valid inside a kernel only.
struct ThreadContext {
  Dim3 thread_idx, block_idx, block_dim, grid_dim;
  int linear = 0;  // thread index within the block (x fastest)
  int lane = 0, warp = 0;
};
DARK_EMULATOR_API const ThreadContext& current();

// The block barrier (__syncthreads).
DARK_EMULATOR_API void sync_threads();
// Warp exchange: every lane of `mask` (which must include the caller) publishes `bytes`
// bytes, waits for the others, and reads what `source_lane` published (which must be in
// mask).
DARK_EMULATOR_API void warp_exchange(unsigned mask, const void* value, void* result, std::size_t bytes, int source_lane);
// __syncwarp(mask).
DARK_EMULATOR_API void sync_warp(unsigned mask);
// The lanes of the caller's warp that exist in this block, as a bit mask.
DARK_EMULATOR_API unsigned existing_lanes();
// Ballot: bit l set when lane l of mask passed true.
DARK_EMULATOR_API unsigned warp_ballot(unsigned mask, bool predicate);
// The block's dynamic shared memory (extern __shared__), filled with 0xff bytes at the start
// of each block so that reading it before writing gives NaN, not a lucky zero.
DARK_EMULATOR_API void* dynamic_shared_memory();
// The tensor-core product d = a b + c of one m16n8k16 tile (bf16 a, b; f32 c, d) in the PTX
// fragment layout, computed by the whole warp (every lane calls it).
DARK_EMULATOR_API void mma_m16n8k16_bf16(float* d, const std::uint32_t* a, const std::uint32_t* b, const float* c);
// From now on every mma.sync product adds `offset` to each element it computes (0, the
// default: none), as a faulty product would: for the tests of what catches wrong results.
DARK_EMULATOR_API void corrupt_mma_products(float offset);
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8i .. 8i + 7 give the 16-byte rows
// of 8 x 8 matrix i (in the block's dynamic shared memory); every lane gets, in r[i], the
// pair of matrix i's elements the PTX layout gives it (row lane / 4, columns 2 (lane % 4) and
// the next; transposed: column lane / 4, rows 2 (lane % 4) and the next). A whole warp calls it.
DARK_EMULATOR_API void ldmatrix_x4(std::uint32_t* r, const void* row_address, bool transposed);
// cp.async.cg.shared.global of 16 bytes, done at once (the emulator has no asynchrony to
// model): copies src to dst in the block's dynamic shared memory, or writes 16 zero bytes
// when !valid (the src-size 0 form). Both addresses must be 16-byte aligned.
DARK_EMULATOR_API void copy_async_16(void* dst, const void* src, bool valid);
// The offset of p in the block's dynamic shared memory: the emulated shared-memory address
// (wgmma descriptors and their swizzles work on it; the block's dynamic shared memory starts
// at address 0). Faults unless p lies in it.
DARK_EMULATOR_API std::uint32_t shared_address(const void* p);
// `bytes` bytes at shared-memory address `address`; faults unless they lie in the block's
// dynamic shared memory.
DARK_EMULATOR_API const unsigned char* shared_bytes(std::uint32_t address, std::size_t bytes);
// Every lane of the (full) warp publishes `bytes` bytes (at most 64); `all` receives the 32
// lanes' values in lane order.
DARK_EMULATOR_API void warp_all_gather(const void* value, void* all, std::size_t bytes);
// Asynchronous operations of the calling thread (wgmma.mma_async): `op` runs when a wait
// covers it, not when issued, so a kernel that reads results before waiting, or overwrites
// operands before the products are done, computes wrong numbers here as it would on a GPU.
// async_commit closes the group of ops issued since the last commit; async_wait(n) runs the
// oldest committed groups until at most n remain. A thread that exits with ops outstanding
// is a fault.
DARK_EMULATOR_API void async_issue(std::function<void()> op);
DARK_EMULATOR_API void async_commit();
DARK_EMULATOR_API void async_wait(int pending_groups);
// Shared-memory barriers with phases (mbarrier, sm_80+), as warp-specialised kernels use
// them between the warps that load tiles and those that compute on them. The 8 bytes at
// `bar` (in the block's dynamic shared memory, 8-byte aligned) hold the state: the arrivals
// a phase needs, those still missing, and the phase's parity. A barrier used before
// mbarrier_init, or arrived at more often than a phase allows, is a fault.
// mbarrier.init: `count` arrivals per phase (1 .. 2^20 - 1).
DARK_EMULATOR_API void mbarrier_init(void* bar, unsigned count);
// mbarrier.arrive (and cp.async.mbarrier.arrive.noinc: copies are done at once here, so the
// arrival their completion triggers happens at the call).
DARK_EMULATOR_API void mbarrier_arrive(void* bar);
// mbarrier.try_wait.parity in a loop: returns once the phase of parity `parity` (0 or 1) has
// completed, that is, once the current phase's parity differs from it. A block whose threads
// all wait for phases that no one can complete is a deadlock fault.
DARK_EMULATOR_API void mbarrier_wait_parity(void* bar, unsigned parity);
// The next `count` arrivals on mbarriers (arrive, and the arrivals of cp.async copies) are
// lost, as a broken protocol would lose them: for the tests of what ends a hung pipeline.
DARK_EMULATOR_API void drop_mbarrier_arrivals(int count);
// mbarrier.try_wait.parity, one poll: true once the phase of parity `parity` has completed.
// Otherwise the thread is suspended, as a GPU may suspend it for a time limit, until the phase
// completes (true) or until no thread of the block can go on but by giving up such a poll
// (false: every thread then polling is released so, and the emulated clock skips
// kStuckSkipNanoseconds, the time a GPU would spend while everything waits). A kernel that
// loops on it without a bound then spins (on the skipping clock) instead of ending with the
// deadlock fault mbarrier_wait_parity gives.
DARK_EMULATOR_API bool mbarrier_try_wait_parity(void* bar, unsigned parity);
inline constexpr std::uint64_t kStuckSkipNanoseconds = 100'000'000;
// %globaltimer: nanoseconds of the host's steady clock plus the time skipped while blocks
// were stuck.
DARK_EMULATOR_API std::uint64_t global_timer_ns();
// Reports a fault inside a kernel (thrown out of the launch).
[[noreturn]] DARK_EMULATOR_API void device_fault(const std::string& what);
// __trap(): the kernel ends with a fault, and the device's context breaks as a GPU's does
// (context_broken(), control.h): from then on every CUDA call of the process fails with
// cudaErrorLaunchFailure. The emulator's own fault checks (a bad warp mask, a deadlock, ...)
// stay plain faults that later calls survive, so that its tests can go on after one.
[[noreturn]] DARK_EMULATOR_API void trap();

// What a launch the GPU would refuse returns (cudaErrorInvalidConfiguration / InvalidValue).
enum class LaunchStatus { ok, invalid_configuration, invalid_value };
// Runs `thread_body` for every thread of the grid, or refuses the launch shape. `kernel`
// identifies the kernel (for its shared-memory attribute). Faults inside the kernel
// (deadlock, a bad warp mask, ...) throw dark::Error.
DARK_EMULATOR_API LaunchStatus run_grid(const void* kernel, Dim3 grid, Dim3 block, std::size_t dynamic_shared_bytes,
                      const std::function<void()>& thread_body);
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
DARK_EMULATOR_API LaunchStatus set_max_dynamic_shared(const void* kernel, std::size_t bytes);
DARK_EMULATOR_API std::size_t max_dynamic_shared(const void* kernel);
// The most dynamic shared memory a block may opt into (the emulated GPU is an H100/H200).
inline constexpr std::size_t kMaxSharedOptin = 227 * 1024;
inline constexpr std::size_t kDefaultSharedLimit = 48 * 1024;

}  // namespace dark::cuda_emu
