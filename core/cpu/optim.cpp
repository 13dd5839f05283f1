// CPU optimizer update kernels (flat float32 buffers; see core/kernels.h). The buffer is
// walked range by range: the decay ranges with the configured weight decay, the gaps between
// them with none, so no element looks anything up. Built with -ffp-contract=off (CMakeLists):
// each operation is rounded on its own, as the CUDA kernels (core/cuda/optim.cu) round it,
// so the two give the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

// Calls body(begin, end, decays) over [0, n) in order: the decay ranges and the gaps between.
template <class Body>
void for_each_decay_run(std::int64_t n, const Tensor& decay_ranges, Body&& body) {
  std::vector<std::int64_t> bounds;
  if (decay_ranges.defined() && decay_ranges.numel() > 0) bounds = decay_ranges.contiguous().to_vector<std::int64_t>();
  std::int64_t at = 0;
  for (std::size_t i = 0; i + 1 < bounds.size(); i += 2) {
    const std::int64_t begin = std::max(at, bounds[i]), end = std::min(n, bounds[i + 1]);
    if (begin > at) body(at, begin, false);
    if (end > begin) body(begin, end, true);
    at = std::max(at, end);
  }
  if (at < n) body(at, n, false);
}

void adamw_step_f32(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& decay_ranges,
                    const AdamWParams& a) {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const float b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2);
  const float step = static_cast<float>(a.lr / a.bias_correction1);
  const float inv_c2 = static_cast<float>(1.0 / a.bias_correction2);
  const float eps = static_cast<float>(a.eps), wd_decay = static_cast<float>(a.lr * a.weight_decay);
  for_each_decay_run(param.numel(), decay_ranges, [&](std::int64_t first, std::int64_t last, bool decays) {
    const float decay = decays ? wd_decay : 0.0f;
    parallel_for(last - first, kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
      for (std::int64_t i = first + begin; i < first + end; ++i) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= step * m[i] / (std::sqrt(v[i] * inv_c2) + eps) + decay * p[i];
      }
    });
  });
}

void sgd_step_f32(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const Tensor& decay_ranges,
                  const SgdParams& s) {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* buf = s.momentum != 0.0 ? momentum_buf.data<float>() : nullptr;
  const float lr = static_cast<float>(s.lr), momentum = static_cast<float>(s.momentum);
  const float wd = static_cast<float>(s.weight_decay);
  for_each_decay_run(param.numel(), decay_ranges, [&](std::int64_t first, std::int64_t last, bool decays) {
    const float decay = decays ? wd : 0.0f;
    parallel_for(last - first, kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = first + begin; i < first + end; ++i) {
        float u = decay != 0.0f ? g[i] + p[i] * decay : g[i];
        if (buf) u = buf[i] = buf[i] * momentum + u;
        p[i] = p[i] - u * lr;
      }
    });
  });
}

// Each chunk summed in order, as reduce sums a float64 line; -ffp-contract=off keeps the
// square rounded apart from the sum (it is exact anyway) and the sum unfused.
void chunk_sq_norms_f32(const Tensor& x, Tensor& out, std::int64_t chunk) {
  DARK_CHECK(chunk > 0 && x.numel() == out.numel() * chunk, "chunk_sq_norms: x ", x.describe(), " is not ",
             out.numel(), " chunks of ", chunk);
  const float* px = x.data<float>();
  double* po = out.data<double>();
  parallel_for(out.numel(), std::max<std::int64_t>(1, kGrainCheap / chunk), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      double acc = 0;
      for (std::int64_t i = c * chunk; i < (c + 1) * chunk; ++i) {
        const double v = px[i];
        acc += v * v;
      }
      po[c] = acc;
    }
  });
}

DARK_REGISTER_KERNEL(adamw_step, cpu, f32, adamw_step_f32);
DARK_REGISTER_KERNEL(sgd_step, cpu, f32, sgd_step_f32);
DARK_REGISTER_KERNEL(chunk_sq_norms, cpu, f32, chunk_sq_norms_f32);

}  // namespace
}  // namespace dark::cpu
