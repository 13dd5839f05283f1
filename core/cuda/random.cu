// fill_normal / fill_uniform and the fused dropout for f32, f64 and bf16 with dark::philox, bit for bit as the
// CPU: element i of out: (N) contiguous uses block philox::block(seed, stream, offset + i/4)
// and lane i % 4, and the value philox::scaled_uniform / scaled_normal(block, lane, ...)
// (core/philox.h: the same double arithmetic on both devices, no library math, no FMA),
// rounded once to the output type (bf16 through float, like the CPU's conversion). Each
// thread computes one Philox block and writes its (up to) four elements.
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/kernels.h"
#include "core/philox.h"

namespace dark::cuda {
namespace {

enum class Distribution { uniform, normal };

template <class T, Distribution kDist>
__global__ void philox_fill_kernel(T* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                                   std::uint64_t offset, double p0, double p1) {
  const std::int64_t blocks = (n + 3) / 4;
  for (std::int64_t j = global_thread(); j < blocks; j += grid_threads()) {
    const philox::Block b = philox::block(seed, stream, offset + static_cast<std::uint64_t>(j));
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const std::int64_t i = 4 * j + lane;
      if (i >= n) break;
      const double v = kDist == Distribution::uniform ? philox::scaled_uniform(b, lane, p0, p1)  // low, high
                                                      : philox::scaled_normal(b, lane, p0, p1);  // mean, std
      out[i] = convert<T>(v);
    }
  }
}

template <class T, Distribution kDist>
void philox_fill(const char* kernel, Tensor& out, std::uint64_t seed, std::uint64_t stream,
                 std::uint64_t offset, double p0, double p1) {
  DARK_CHECK(out.is_contiguous(), kernel, ": ", out.describe(), " is not contiguous");
  const std::int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  launch(philox_fill_kernel<T, kDist>, {grid_for((n + 3) / 4), kThreads}, out.data<T>(), n, seed, stream,
                                                                    offset, p0, p1);
  DARK_CUDA_CHECK_LAUNCH();
}

template <class T>
void fill_normal(Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset,
                 double mean, double std) {
  philox_fill<T, Distribution::normal>("fill_normal", out, seed, stream, offset, mean, std);
}

template <class T>
void fill_uniform(Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset,
                  double low, double high) {
  philox_fill<T, Distribution::uniform>("fill_uniform", out, seed, stream, offset, low, high);
}

// Dropout, forward: each thread one Philox block, four elements of x; the 8 threads of a mask
// word OR their bits together by shuffles. The stream's offset, where given, is read from
// device memory (a graph launch's step key).
template <class T>
__global__ void dropout_forward_kernel(const T* x, T* out, std::int32_t* mask, std::int64_t n, T threshold, T scale,
                                       std::uint64_t seed, std::uint64_t stream, const std::int64_t* stream_offset) {
  using C = acc_t<T>;
  if (stream_offset) stream += static_cast<std::uint64_t>(*stream_offset);
  const std::int64_t blocks = (n + 3) / 4;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // Whole warps go round the loop together (blocks of whole warps), so the shuffles see all 32
  // lanes; lanes past the end add no bits.
  for (std::int64_t j = global_thread(); j - lane < blocks; j += grid_threads()) {
    std::uint32_t bits = 0;
    if (j < blocks) {
      const philox::Block b = philox::block(seed, stream, static_cast<std::uint64_t>(j));
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::int64_t i = 4 * j + k;
        if (i >= n) break;
        const bool keep = convert<C>(convert<T>(philox::scaled_uniform(b, k, 0.0, 1.0))) >= convert<C>(threshold);
        out[i] = convert<T>(convert<C>(x[i]) * (keep ? convert<C>(scale) : C(0)));
        bits |= static_cast<std::uint32_t>(keep) << (4 * (j % 8) + k);
      }
    }
    bits |= __shfl_xor_sync(0xffffffffu, bits, 1);
    bits |= __shfl_xor_sync(0xffffffffu, bits, 2);
    bits |= __shfl_xor_sync(0xffffffffu, bits, 4);
    if (j % 8 == 0 && j < blocks) mask[j / 8] = static_cast<std::int32_t>(bits);
  }
}

template <class T>
__global__ void dropout_backward_kernel(const T* dy, const std::int32_t* mask, T* dx, std::int64_t n, T scale) {
  using C = acc_t<T>;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const bool keep = (static_cast<std::uint32_t>(mask[i / 32]) >> (i % 32)) & 1u;
    dx[i] = convert<T>(convert<C>(dy[i]) * (keep ? convert<C>(scale) : C(0)));
  }
}

void check_dropout_tensors(const Tensor& x, const Tensor& out, const Tensor& mask) {
  DARK_CHECK(x.is_contiguous() && out.is_contiguous() && x.shape() == out.shape(), "dropout: ", x.describe(), " and ",
             out.describe(), " must be contiguous and of one shape");
  DARK_CHECK(mask.dtype() == DType::i32 && mask.is_contiguous() && mask.numel() == (x.numel() + 31) / 32,
             "dropout: mask ", mask.describe(), " must be i32 words, one per 32 elements of ", x.describe());
}

template <class T>
void dropout_forward(const Tensor& x, Tensor& out, Tensor& mask, double p, std::uint64_t seed, std::uint64_t stream,
                     const Tensor& stream_offset) {
  check_dtype<T>("dropout_forward", {{"x", &x}, {"out", &out}});
  check_dropout_tensors(x, out, mask);  // the op checked the stream offset
  const std::int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x);
  launch(dropout_forward_kernel<T>, {grid_for((n + 3) / 4), kThreads}, x.data<T>(), out.data<T>(),
         mask.data<std::int32_t>(), n, convert<T>(p), convert<T>(1.0 / (1.0 - p)), seed, stream,
         stream_offset.defined() ? stream_offset.data<std::int64_t>() : nullptr);
  DARK_CUDA_CHECK_LAUNCH();
}

template <class T>
void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx, double p) {
  check_dtype<T>("dropout_backward", {{"dy", &dy}, {"dx", &dx}});
  check_dropout_tensors(dy, dx, mask);
  const std::int64_t n = dy.numel();
  if (n == 0) return;
  DeviceGuard guard(dy);
  launch(dropout_backward_kernel<T>, {grid_for(n), kThreads}, dy.data<T>(), mask.data<std::int32_t>(), dx.data<T>(), n,
         convert<T>(1.0 / (1.0 - p)));
  DARK_CUDA_CHECK_LAUNCH();
}

DARK_REGISTER_KERNEL(fill_normal, cuda, f32, &fill_normal<float>);
DARK_REGISTER_KERNEL(fill_normal, cuda, f64, &fill_normal<double>);
DARK_REGISTER_KERNEL(fill_normal, cuda, bf16, &fill_normal<BFloat16>);
DARK_REGISTER_KERNEL(fill_uniform, cuda, f32, &fill_uniform<float>);
DARK_REGISTER_KERNEL(fill_uniform, cuda, f64, &fill_uniform<double>);
DARK_REGISTER_KERNEL(fill_uniform, cuda, bf16, &fill_uniform<BFloat16>);
DARK_REGISTER_KERNEL(dropout_forward, cuda, f32, &dropout_forward<float>);
DARK_REGISTER_KERNEL(dropout_forward, cuda, f64, &dropout_forward<double>);
DARK_REGISTER_KERNEL(dropout_forward, cuda, bf16, &dropout_forward<BFloat16>);
DARK_REGISTER_KERNEL(dropout_backward, cuda, f32, &dropout_backward<float>);
DARK_REGISTER_KERNEL(dropout_backward, cuda, f64, &dropout_backward<double>);
DARK_REGISTER_KERNEL(dropout_backward, cuda, bf16, &dropout_backward<BFloat16>);

}  // namespace
}  // namespace dark::cuda
