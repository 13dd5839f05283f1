// CPU Philox fills and dropout (see core/philox.h for the keying shared with the GPU).
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
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

#define DARK_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

// Dropout computes in T: float for f32 (as the CPU's mul_scalar and mul do), double for f64.
// A word of the mask is 32 elements: 8 Philox blocks, drawn first (scalar: one block is a few
// dozen integer instructions, which vector lanes did not make faster), then the 32 elements
// in vector lanes. The uniform is philox::uniform01 itself: scaled_uniform(0, 1) adds 0 to it
// and multiplies it by 1, exactly.
template <class T>
DARK_INLINE void dropout_words(const T* x, T* out, std::int32_t* mask, std::int64_t begin, std::int64_t end,
                               std::int64_t n, T threshold, T scale, std::uint64_t seed, std::uint64_t stream) {
  for (std::int64_t w = begin; w < end; ++w) {
    std::uint32_t bits[32];
    for (int blk = 0; blk < 8; ++blk) {
      const philox::Block b = philox::block(seed, stream, static_cast<std::uint64_t>(8 * w + blk));
      for (int lane = 0; lane < 4; ++lane) bits[4 * blk + lane] = b.v[lane];
    }
    const int count = n - 32 * w < 32 ? static_cast<int>(n - 32 * w) : 32;
    const T* xw = x + 32 * w;
    T* ow = out + 32 * w;
    std::uint32_t word = 0;
#pragma omp simd reduction(| : word)
    for (int e = 0; e < count; ++e) {
      const bool keep = static_cast<T>(philox::uniform01(bits[e])) >= threshold;
      ow[e] = xw[e] * (keep ? scale : T(0));
      word |= static_cast<std::uint32_t>(keep) << e;
    }
    mask[w] = static_cast<std::int32_t>(word);
  }
}

template <class T>
DARK_INLINE void dropout_backward_words(const T* dy, const std::int32_t* mask, T* dx, std::int64_t begin,
                                        std::int64_t end, std::int64_t n, T scale) {
  for (std::int64_t w = begin; w < end; ++w) {
    const int count = n - 32 * w < 32 ? static_cast<int>(n - 32 * w) : 32;
    const auto word = static_cast<std::uint32_t>(mask[w]);
#pragma omp simd
    for (int e = 0; e < count; ++e) dx[32 * w + e] = dy[32 * w + e] * ((word >> e) & 1u ? scale : T(0));
  }
}

DARK_CPU_CLONES void dropout_words_f32(const float* x, float* out, std::int32_t* mask, std::int64_t begin,
                                       std::int64_t end, std::int64_t n, float threshold, float scale,
                                       std::uint64_t seed, std::uint64_t stream) {
  dropout_words(x, out, mask, begin, end, n, threshold, scale, seed, stream);
}
DARK_CPU_CLONES void dropout_words_f64(const double* x, double* out, std::int32_t* mask, std::int64_t begin,
                                       std::int64_t end, std::int64_t n, double threshold, double scale,
                                       std::uint64_t seed, std::uint64_t stream) {
  dropout_words(x, out, mask, begin, end, n, threshold, scale, seed, stream);
}
DARK_CPU_CLONES void dropout_backward_words_f32(const float* dy, const std::int32_t* mask, float* dx,
                                                std::int64_t begin, std::int64_t end, std::int64_t n, float scale) {
  dropout_backward_words(dy, mask, dx, begin, end, n, scale);
}
DARK_CPU_CLONES void dropout_backward_words_f64(const double* dy, const std::int32_t* mask, double* dx,
                                                std::int64_t begin, std::int64_t end, std::int64_t n, double scale) {
  dropout_backward_words(dy, mask, dx, begin, end, n, scale);
}

template <class T>
void dropout_forward_kernel(const Tensor& x, Tensor& out, Tensor& mask, double p, std::uint64_t seed,
                            std::uint64_t stream, const Tensor& stream_offset) {
  if (stream_offset.defined()) stream += static_cast<std::uint64_t>(stream_offset.data<std::int64_t>()[0]);
  const T threshold = static_cast<T>(p), scale = static_cast<T>(1.0 / (1.0 - p));
  const std::int64_t n = x.numel();
  parallel_for((n + 31) / 32, 1 << 9, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>)
      dropout_words_f32(x.data<T>(), out.data<T>(), mask.data<std::int32_t>(), begin, end, n, threshold, scale, seed,
                        stream);
    else
      dropout_words_f64(x.data<T>(), out.data<T>(), mask.data<std::int32_t>(), begin, end, n, threshold, scale, seed,
                        stream);
  });
}

template <class T>
void dropout_backward_kernel(const Tensor& dy, const Tensor& mask, Tensor& dx, double p) {
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  const std::int64_t n = dy.numel();
  parallel_for((n + 31) / 32, kGrainCheap / 32, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>)
      dropout_backward_words_f32(dy.data<T>(), mask.data<std::int32_t>(), dx.data<T>(), begin, end, n, scale);
    else
      dropout_backward_words_f64(dy.data<T>(), mask.data<std::int32_t>(), dx.data<T>(), begin, end, n, scale);
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
