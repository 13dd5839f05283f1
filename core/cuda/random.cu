// fill_normal / fill_uniform for f32, f64 and bf16 with dark::philox, bit for bit as the
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

DARK_REGISTER_KERNEL(fill_normal, cuda, f32, &fill_normal<float>);
DARK_REGISTER_KERNEL(fill_normal, cuda, f64, &fill_normal<double>);
DARK_REGISTER_KERNEL(fill_normal, cuda, bf16, &fill_normal<BFloat16>);
DARK_REGISTER_KERNEL(fill_uniform, cuda, f32, &fill_uniform<float>);
DARK_REGISTER_KERNEL(fill_uniform, cuda, f64, &fill_uniform<double>);
DARK_REGISTER_KERNEL(fill_uniform, cuda, bf16, &fill_uniform<BFloat16>);

}  // namespace
}  // namespace dark::cuda
