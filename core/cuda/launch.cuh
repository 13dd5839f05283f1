// Shared helpers of the CUDA kernel files: the one way to launch a kernel (launch(), which
// the CUDA emulator also implements), launch sizes for grid-stride loops, the accumulation
// type of each storage type (bf16 computes in float) and value conversions that round
// exactly as the CPU does (BFloat16's own round-to-nearest-even; float to integer through
// saturating_cast).
// Kernels use 64-bit indices everywhere and launch on the thread's current stream (stream.h:
// the legacy default stream, or a graph capture's).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/saturating_cast.h"

namespace dark::cuda {

// Where and how a kernel runs: grid and block shape, dynamic shared memory, stream.
struct LaunchShape {
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  cudaStream_t stream = current_stream();
};

// kernel<<<grid, block, shared_bytes, stream>>>(args...), through cudaLaunchKernel (so a
// refused launch throws here, naming the error) or, under the emulator, on the CPU (now, or
// when a captured graph is launched: the node keeps its own copy of the arguments). The
// arguments convert to the kernel's parameter types first, as in a <<<>>> launch.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), const LaunchShape& shape, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: the argument count differs from the kernel's");
  std::tuple<std::decay_t<Params>...> values(std::forward<Args>(args)...);
#if defined(DARK_CUDA_EMULATOR)
  try {  // a fault in the kernel throws here at once (a GPU reports it at the next synchronising call)
    DARK_CUDA_CHECK(::dark::cuda_emu::run_or_record(shape.stream, [kernel, values = std::move(values), shape] {
      return ::dark::cuda_emu::launch_error(
          ::dark::cuda_emu::run_grid(reinterpret_cast<const void*>(kernel), ::dark::cuda_emu::as_dim3(shape.grid),
                                     ::dark::cuda_emu::as_dim3(shape.block), shape.shared_bytes,
                                     [&] { std::apply(kernel, values); }));
    }));
  } catch (const Error& fault) {
    const std::string hang = hang::take_report();
    // A __trap() broke the context, as it does a GPU's: the process ends as DARK_CUDA_CHECK
    // ends it on a GPU at the next synchronising call.
    if (const cudaError_t status = cudaPeekAtLastError(); is_sticky(status))
      end_process_on_sticky_error(
          str(fault.what(), ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")", hang));
    if (hang.empty()) throw;
    throw Error(str(fault.what(), hang));
  }
#else
  std::apply(
      [&](auto&... value) {
        void* pointers[] = {static_cast<void*>(&value)...};
        DARK_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), shape.grid, shape.block, pointers,
                                         shape.shared_bytes, shape.stream));
      },
      values);
#endif
}

// Lets `kernel` take `bytes` of dynamic shared memory: beyond the default 48 KB a kernel must
// opt in (up to the GPU's cudaDevAttrMaxSharedMemoryPerBlockOptin).
template <class Kernel>
void allow_dynamic_shared(Kernel* kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    DARK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

inline constexpr int kThreads = 256;          // threads per block of elementwise kernels
inline constexpr int kWarpsPerBlock = kThreads / 32;  // warps of such a block (one row each in row kernels)
inline constexpr std::int64_t kMaxBlocks = 8192;  // grid-stride loops cover the rest

// Blocks for a grid-stride loop over n items with `threads` threads per block (n > 0).
inline unsigned grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__device__ __forceinline__ std::int64_t global_thread() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_threads() {
  return static_cast<std::int64_t>(blockDim.x) * gridDim.x;
}

// The type arithmetic runs in: float for bf16 and f32, double for f64.
template <class T> struct AccOf { using type = T; };
template <> struct AccOf<BFloat16> { using type = float; };
template <class T> using acc_t = typename AccOf<T>::type;

// Value conversion between any two storage types; bf16 goes through float on both sides;
// floats become integers by saturating_cast (NaN -> 0, out of range clamps), as on the CPU.
template <class To, class From>
__host__ __device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, BFloat16>) return x;
    else return BFloat16(static_cast<float>(x));
  } else if constexpr (std::is_same_v<From, BFloat16>) {
    return convert<To>(static_cast<float>(x));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return saturating_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

// Throws naming kernel and role unless every tensor holds T (the dispatched dtype).
template <class T>
void check_dtype(const char* kernel, std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
  for (const auto& [role, t] : tensors)
    DARK_CHECK(t->dtype() == dtype_of<T>::value, kernel, ": ", role, " ", t->describe(),
               " is not ", dtype_name(dtype_of<T>::value), " like the other operands");
}

// Loads an element as its accumulation type / stores an accumulation value rounded.
template <class T>
__device__ __forceinline__ acc_t<T> load(const T* p, std::int64_t i) {
  return convert<acc_t<T>>(p[i]);
}
template <class T>
__device__ __forceinline__ void store(T* p, std::int64_t i, acc_t<T> v) {
  p[i] = convert<T>(v);
}

}  // namespace dark::cuda
