// CPU optimizer update kernels (flat float32 buffers).
#include <cmath>

#include "core/cpu/parallel.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

void adamw_step_f32(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWParams& a) {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const float b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2);
  const float step = static_cast<float>(a.lr / a.bias_correction1);
  const float inv_c2 = static_cast<float>(1.0 / a.bias_correction2);
  const float eps = static_cast<float>(a.eps), decay = static_cast<float>(a.lr * a.weight_decay);
  parallel_for(param.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
    for (std::int64_t i = begin; i < end; ++i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      p[i] -= step * m[i] / (std::sqrt(v[i] * inv_c2) + eps) + decay * p[i];
    }
  });
}

DARK_REGISTER_KERNEL(adamw_step, cpu, f32, adamw_step_f32);

}  // namespace
}  // namespace dark::cpu
