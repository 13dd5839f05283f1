// What CUDA C++ sources see instead of <cuda_runtime.h> when they are compiled by the host
// compiler for the CUDA emulator (DARK_CUDA_EMULATOR): the CUDA keywords, the built-in
// variables (threadIdx, ...), warp and block synchronisation, atomics, the math intrinsics
// our kernels use, and the subset of the runtime API the backend and the kernels call.
// Kernels then run on the CPU (grid.h), on emulated device memory (memory.h), in a fixed
// order: a test of a CUDA kernel against the CPU runs everywhere, a GPU or not.
//
// Semantics that differ from a GPU: every stream is the one device queue, so asynchronous
// calls complete before they return (ordering is as strict as it gets; overlap is not
// emulated; work captured into a graph runs when the graph is launched, as on a GPU);
// math functions (expf, log, sin, ... and __expf and friends) are the host
// library's, not CUDA's, so results that depend on their last bits differ from a GPU's
// (README, "What the emulator cannot see"); float atomics add in the order the threads run.
// Like nvcc, the host compiler contracts a * b + c into FMAs in kernels (CMakeLists.txt).
// Timing means nothing.
#pragma once
#include <math.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>

#include "cuda_emulator/grid.h"
#include "cuda_emulator/wgmma.h"
#include "core/portable_math.h"

// ---- keywords ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static  // one block runs at a time: a function static is the block's memory
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

// Dynamic shared memory: `DARK_DYNAMIC_SHARED(float, smem);` declares `float* smem`.
#define DARK_DYNAMIC_SHARED(TYPE, NAME) TYPE* NAME = static_cast<TYPE*>(::dark::cuda_emu::dynamic_shared_memory())

// ---- built-in types and variables ----
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

namespace dark::cuda_emu {
inline uint3 as_uint3(const Dim3& d) { return {d.x, d.y, d.z}; }
inline Dim3 as_dim3(const dim3& d) { return {d.x, d.y, d.z}; }
}  // namespace dark::cuda_emu

#define threadIdx (::dark::cuda_emu::as_uint3(::dark::cuda_emu::current().thread_idx))
#define blockIdx (::dark::cuda_emu::as_uint3(::dark::cuda_emu::current().block_idx))
#define blockDim (::dark::cuda_emu::as_uint3(::dark::cuda_emu::current().block_dim))
#define gridDim (::dark::cuda_emu::as_uint3(::dark::cuda_emu::current().grid_dim))
inline constexpr int warpSize = 32;

// ---- synchronisation, warp shuffles and votes ----
inline void __syncthreads() { ::dark::cuda_emu::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::dark::cuda_emu::sync_warp(mask); }

namespace dark::cuda_emu {
template <class T>
T shuffle_from(unsigned mask, T v, int source) {
  static_assert(std::is_trivially_copyable_v<T>, "warp shuffles move trivially copyable values");
  T out;
  warp_exchange(mask, &v, &out, sizeof(T), source);
  return out;
}
inline int lane_id() { return current().lane; }
}  // namespace dark::cuda_emu

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = ::dark::cuda_emu::lane_id(), segment = lane / width * width;
  return ::dark::cuda_emu::shuffle_from(mask, v, segment + ((src_lane % width) + width) % width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::dark::cuda_emu::lane_id(), segment = lane / width * width, src = lane ^ lane_mask;
  return ::dark::cuda_emu::shuffle_from(mask, v, src >= segment + width ? lane : src);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::dark::cuda_emu::lane_id(), segment = lane / width * width;
  const int src = lane + static_cast<int>(delta);
  return ::dark::cuda_emu::shuffle_from(mask, v, src >= segment + width ? lane : src);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::dark::cuda_emu::lane_id(), segment = lane / width * width;
  const int src = lane - static_cast<int>(delta);
  return ::dark::cuda_emu::shuffle_from(mask, v, src < segment ? lane : src);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) { return ::dark::cuda_emu::warp_ballot(mask, predicate != 0); }
inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline unsigned __activemask() { return ::dark::cuda_emu::existing_lanes(); }

// ---- atomics (one emulated thread runs at a time: plain read-modify-write) ----
template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  const T old = *p;
  if (v < old) *p = v;
  return old;
}
template <class T>
T atomicMax(T* p, T v) {
  const T old = *p;
  if (v > old) *p = v;
  return old;
}
template <class T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

// ---- math intrinsics ----
// The _rn intrinsics round each operation on its own: nvcc never fuses them into an FMA, and
// this emulator compiles kernels with contraction on (as nvcc does), so their results pass
// through portable::opaque, which the host compiler cannot fuse across.
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return ::dark::portable::opaque(sqrtf(x)); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return ::dark::portable::opaque(a + b); }
inline float __fsub_rn(float a, float b) { return ::dark::portable::opaque(a - b); }
inline float __fmul_rn(float a, float b) { return ::dark::portable::opaque(a * b); }
inline float __fdiv_rn(float a, float b) { return ::dark::portable::opaque(a / b); }
inline double __dadd_rn(double a, double b) { return ::dark::portable::opaque(a + b); }
inline double __dsub_rn(double a, double b) { return ::dark::portable::opaque(a - b); }
inline double __dmul_rn(double a, double b) { return ::dark::portable::opaque(a * b); }
inline double __ddiv_rn(double a, double b) { return ::dark::portable::opaque(a / b); }
inline double __dsqrt_rn(double x) { return ::dark::portable::opaque(sqrt(x)); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x), *c = cosf(x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752440); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T>
T __ldg(const T* p) { return *p; }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
[[noreturn]] inline void __trap() { ::dark::cuda_emu::trap(); }

// ---- the runtime API ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorECCUncorrectable = 214,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchTimeout = 702,
  cudaErrorContextIsDestroyed = 709,
  cudaErrorAssert = 710,
  cudaErrorHardwareStackError = 714,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorInvalidAddressSpace = 717,
  cudaErrorInvalidPc = 718,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureImplicit = 906,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
#define cudaStreamLegacy (reinterpret_cast<cudaStream_t>(0x1))
#define cudaStreamPerThread (reinterpret_cast<cudaStream_t>(0x2))
inline constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2;
inline constexpr unsigned cudaHostAllocDefault = 0, cudaHostAllocPortable = 1, cudaHostAllocMapped = 2;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  std::size_t sharedMemPerBlockOptin;
  int warpSize;
  int maxThreadsPerBlock;
  int major, minor;
  int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes);
cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
// Host memory is the emulated device's too: the device pointer of an allocation is its host one.
cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags);
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes);
cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
// Graph capture (one at a time, as our code needs): work queued on the capturing stream is
// recorded, not run; a launch or copy on the legacy stream, a synchronous copy or memset, a
// synchronisation or a cudaFree while a capture is under way is refused as CUDA refuses it
// (cudaErrorStreamCaptureImplicit / Unsupported) and invalidates the capture. cudaMalloc is
// allowed (the relaxed mode our backend captures in). A launched graph runs its nodes in order.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0) return cudaErrorInvalidValue;
  return ::dark::cuda_emu::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), static_cast<std::size_t>(value)) ==
                 ::dark::cuda_emu::LaunchStatus::ok
             ? cudaSuccess
             : cudaErrorInvalidValue;
}

// What our code reads of a kernel's attributes. numRegs: the emulated GPU reports for every
// kernel the count ptxas gives this project's warp-specialised kernels at sm_90a (168, the
// most a thread of a 384-thread block can have; scripts/kernel_evidence.py shows ptxas's
// counts), or what a test set with set_function_registers (control.h).
struct cudaFuncAttributes {
  int numRegs;
  int maxThreadsPerBlock;
};
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, F* kernel) {
  if (attributes == nullptr || kernel == nullptr) return cudaErrorInvalidValue;
  attributes->numRegs = ::dark::cuda_emu::function_registers();
  attributes->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

namespace dark::cuda_emu {
// Work for `stream`: run now (no capture under way, or another stream), recorded into the
// capture (the capturing stream; returns cudaSuccess, and a node that fails when the graph
// is launched throws), or refused (the legacy stream during a capture: the capture is
// invalidated, as on a GPU).
cudaError_t run_or_record(cudaStream_t stream, std::function<cudaError_t()> work);
inline cudaError_t launch_error(LaunchStatus s) {
  switch (s) {
    case LaunchStatus::ok: return cudaSuccess;
    case LaunchStatus::invalid_configuration: return cudaErrorInvalidConfiguration;
    case LaunchStatus::invalid_value: return cudaErrorInvalidValue;
  }
  return cudaErrorLaunchFailure;
}
}  // namespace dark::cuda_emu
