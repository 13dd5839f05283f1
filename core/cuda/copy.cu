// Data movement kernels for every dtype (f32, f64, bf16, i32, i64):
//   fill          out: (N) <- value, rounded once to out's dtype
//   strided_copy  dst[i] = src[i]; src and dst: same shape, same dtype, any strides
//   cast          dst[i] = convert(src[i]); dispatched on src's dtype, dst any dtype;
//                 float -> integer saturates (NaN -> 0), as on the CPU
// Strided operands go through StridedIndexer; fully contiguous layouts take a flat loop that
// moves 16-byte packs (core/cuda/vector_access.cuh).
#include <array>
#include <cstdint>

#include "core/cuda/indexing.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/vector_access.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

template <class T>
__global__ void fill_kernel(T* out, std::int64_t n, T value) {
  for_each_contiguous(n, [value](T& y) { y = value; }, out);
}

template <class T>
__global__ void fill_strided_kernel(T* out, std::int64_t n, T value, StridedIndexer<1> ix) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    std::int64_t off[1];
    ix.offsets(i, off);
    out[off[0]] = value;
  }
}

template <class T>
void fill(Tensor& out, double value) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  const T v = convert<T>(value);
  const auto ix = make_indexer<1>("fill", out.shape(), {&out.strides()});
  if (ix.contiguous()) {
    launch(fill_kernel<T>, {grid_for_packs<T>(n), kThreads}, out.data<T>(), n, v);
  } else {
    launch(fill_strided_kernel<T>, {grid_for(n), kThreads}, out.data<T>(), n, v, ix);
  }
  DARK_CUDA_CHECK_LAUNCH();
}

// Operand 0 is the destination, operand 1 the source.
template <class To, class From, bool kContiguous>
__global__ void convert_kernel(const From* src, To* dst, std::int64_t n, StridedIndexer<2> ix) {
  if constexpr (kContiguous) {
    for_each_contiguous(n, [](From x, To& y) { y = convert<To>(x); }, src, dst);
  } else {
    for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
      std::int64_t off[2];
      ix.offsets(i, off);
      dst[off[0]] = convert<To>(src[off[1]]);
    }
  }
}

template <class To, class From>
void launch_convert(const char* kernel, const Tensor& src, Tensor& dst) {
  DARK_CHECK(src.shape() == dst.shape(), kernel, ": source ", src.describe(), " and destination ",
             dst.describe(), " differ in shape");
  DARK_CHECK(src.device() == dst.device(), kernel, ": source ", src.describe(),
             " and destination ", dst.describe(), " are on different devices");
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(dst);
  const auto ix = make_indexer<2>(kernel, dst.shape(), {&dst.strides(), &src.strides()});
  if (ix.contiguous()) {
    launch(convert_kernel<To, From, true>, {grid_for_packs<To, From>(n), kThreads}, src.data<From>(), dst.data<To>(), n,
           ix);
  } else {
    launch(convert_kernel<To, From, false>, {grid_for(n), kThreads}, src.data<From>(), dst.data<To>(), n, ix);
  }
  DARK_CUDA_CHECK_LAUNCH();
}

template <class T>
void strided_copy(const Tensor& src, Tensor& dst) {
  check_dtype<T>("strided_copy", {{"src", &src}, {"dst", &dst}});
  launch_convert<T, T>("strided_copy", src, dst);
}

template <class From>
void cast(const Tensor& src, Tensor& dst) {
  switch (dst.dtype()) {
    case DType::f32: return launch_convert<float, From>("cast", src, dst);
    case DType::f64: return launch_convert<double, From>("cast", src, dst);
    case DType::bf16: return launch_convert<BFloat16, From>("cast", src, dst);
    case DType::i32: return launch_convert<std::int32_t, From>("cast", src, dst);
    case DType::i64: return launch_convert<std::int64_t, From>("cast", src, dst);
  }
  throw Error(str("cast: unknown destination dtype for ", dst.describe()));
}

DARK_REGISTER_KERNEL(fill, cuda, f32, &fill<float>);
DARK_REGISTER_KERNEL(fill, cuda, f64, &fill<double>);
DARK_REGISTER_KERNEL(fill, cuda, bf16, &fill<BFloat16>);
DARK_REGISTER_KERNEL(fill, cuda, i32, &fill<std::int32_t>);
DARK_REGISTER_KERNEL(fill, cuda, i64, &fill<std::int64_t>);

DARK_REGISTER_KERNEL(strided_copy, cuda, f32, &strided_copy<float>);
DARK_REGISTER_KERNEL(strided_copy, cuda, f64, &strided_copy<double>);
DARK_REGISTER_KERNEL(strided_copy, cuda, bf16, &strided_copy<BFloat16>);
DARK_REGISTER_KERNEL(strided_copy, cuda, i32, &strided_copy<std::int32_t>);
DARK_REGISTER_KERNEL(strided_copy, cuda, i64, &strided_copy<std::int64_t>);

DARK_REGISTER_KERNEL(cast, cuda, f32, &cast<float>);
DARK_REGISTER_KERNEL(cast, cuda, f64, &cast<double>);
DARK_REGISTER_KERNEL(cast, cuda, bf16, &cast<BFloat16>);
DARK_REGISTER_KERNEL(cast, cuda, i32, &cast<std::int32_t>);
DARK_REGISTER_KERNEL(cast, cuda, i64, &cast<std::int64_t>);

}  // namespace
}  // namespace dark::cuda
