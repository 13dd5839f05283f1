// CPU Philox fills (see core/philox.h for the keying shared with the GPU).
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/kernels.h"
#include "core/philox.h"

namespace dark::cpu {
namespace {

template <class T, class Sample>
void philox_fill(Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset, Sample sample) {
  T* p = out.data<T>();
  const std::int64_t n = out.numel();
  const std::int64_t blocks = (n + 3) / 4;
  parallel_for(blocks, 1 << 12, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t blk = begin; blk < end; ++blk) {
      const philox::Block b = philox::block(seed, stream, offset + static_cast<std::uint64_t>(blk));
      for (int lane = 0; lane < 4 && blk * 4 + lane < n; ++lane) {
        const double v = sample(b, lane);
        if constexpr (std::is_same_v<T, BFloat16>) p[blk * 4 + lane] = BFloat16(static_cast<float>(v));
        else p[blk * 4 + lane] = static_cast<T>(v);
      }
    }
  });
}

template <class T>
void fill_normal_kernel(Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset,
                        double mean, double std) {
  philox_fill<T>(out, seed, stream, offset,
                 [&](const philox::Block& b, int lane) { return philox::scaled_normal(b, lane, mean, std); });
}

template <class T>
void fill_uniform_kernel(Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset,
                         double low, double high) {
  philox_fill<T>(out, seed, stream, offset,
                 [&](const philox::Block& b, int lane) { return philox::scaled_uniform(b, lane, low, high); });
}

DARK_REGISTER_KERNEL(fill_normal, cpu, f32, fill_normal_kernel<float>);
DARK_REGISTER_KERNEL(fill_normal, cpu, f64, fill_normal_kernel<double>);
DARK_REGISTER_KERNEL(fill_normal, cpu, bf16, fill_normal_kernel<BFloat16>);
DARK_REGISTER_KERNEL(fill_uniform, cpu, f32, fill_uniform_kernel<float>);
DARK_REGISTER_KERNEL(fill_uniform, cpu, f64, fill_uniform_kernel<double>);
DARK_REGISTER_KERNEL(fill_uniform, cpu, bf16, fill_uniform_kernel<BFloat16>);

}  // namespace
}  // namespace dark::cpu
