// CPU Philox fills and dropout (see core/philox.h for the keying shared with the GPU).
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

// Dropout computes in T: float for f32 (as the CPU's mul_scalar and mul do), double for f64.
// A word of the mask is 32 elements: 8 Philox blocks.
template <class T>
void dropout_forward_kernel(const Tensor& x, Tensor& out, Tensor& mask, double p, std::uint64_t seed,
                            std::uint64_t stream, const Tensor& stream_offset) {
  const T* px = x.data<T>();
  T* po = out.data<T>();
  auto* bits = mask.data<std::int32_t>();
  if (stream_offset.defined()) stream += static_cast<std::uint64_t>(stream_offset.data<std::int64_t>()[0]);
  const T threshold = static_cast<T>(p), scale = static_cast<T>(1.0 / (1.0 - p));
  const std::int64_t n = x.numel();
  parallel_for((n + 31) / 32, 1 << 10, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t w = begin; w < end; ++w) {
      std::uint32_t word = 0;
      for (int blk = 0; blk < 8 && 32 * w + 4 * blk < n; ++blk) {
        const philox::Block b = philox::block(seed, stream, static_cast<std::uint64_t>(8 * w + blk));
        for (int lane = 0; lane < 4 && 32 * w + 4 * blk + lane < n; ++lane) {
          const std::int64_t i = 32 * w + 4 * blk + lane;
          const bool keep = static_cast<T>(philox::scaled_uniform(b, lane, 0.0, 1.0)) >= threshold;
          po[i] = px[i] * (keep ? scale : T(0));
          word |= static_cast<std::uint32_t>(keep) << (4 * blk + lane);
        }
      }
      bits[w] = static_cast<std::int32_t>(word);
    }
  });
}

template <class T>
void dropout_backward_kernel(const Tensor& dy, const Tensor& mask, Tensor& dx, double p) {
  const T* pdy = dy.data<T>();
  const auto* bits = mask.data<std::int32_t>();
  T* pdx = dx.data<T>();
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  parallel_for(dy.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      pdx[i] = pdy[i] * ((static_cast<std::uint32_t>(bits[i / 32]) >> (i % 32)) & 1u ? scale : T(0));
  });
}

DARK_REGISTER_KERNEL(fill_normal, cpu, f32, fill_normal_kernel<float>);
DARK_REGISTER_KERNEL(fill_normal, cpu, f64, fill_normal_kernel<double>);
DARK_REGISTER_KERNEL(fill_normal, cpu, bf16, fill_normal_kernel<BFloat16>);
DARK_REGISTER_KERNEL(fill_uniform, cpu, f32, fill_uniform_kernel<float>);
DARK_REGISTER_KERNEL(fill_uniform, cpu, f64, fill_uniform_kernel<double>);
DARK_REGISTER_KERNEL(fill_uniform, cpu, bf16, fill_uniform_kernel<BFloat16>);
DARK_REGISTER_KERNEL(dropout_forward, cpu, f32, dropout_forward_kernel<float>);
DARK_REGISTER_KERNEL(dropout_forward, cpu, f64, dropout_forward_kernel<double>);
DARK_REGISTER_KERNEL(dropout_backward, cpu, f32, dropout_backward_kernel<float>);
DARK_REGISTER_KERNEL(dropout_backward, cpu, f64, dropout_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
