// Optimizer updates on CUDA over flat float32 buffers, one kernel for the whole buffer per
// step (core/kernels.h): each thread finds whether its element decays by a binary search in
// the (R, 2) decay ranges (R is small: runs of parameters), then applies the CPU's formulas
// (core/cpu/optim.cpp) in float32 with the CPU's roundings: every product, sum, quotient and
// square root rounded on its own (the _rn intrinsics, which nvcc never contracts into an
// FMA), so the GPU's buffers equal the CPU's bit for bit. Contracted, SGD's momentum buffer
// after three steps was 2e-5 relative off on an H200: buf * momentum + (g + p * decay) is a
// sum whose terms nearly cancel, and an FMA skips the rounding of each product.
#include <cmath>
#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

// True when i lies in one of the sorted, disjoint ranges [r[2k], r[2k + 1]).
__device__ __forceinline__ bool in_ranges(const std::int64_t* r, std::int64_t count, std::int64_t i) {
  std::int64_t lo = 0, hi = count;  // the first range whose end is > i
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) / 2;
    if (r[2 * mid + 1] <= i) lo = mid + 1;
    else hi = mid;
  }
  return lo < count && r[2 * lo] <= i;
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t n, const std::int64_t* ranges,
                             std::int64_t range_count, float b1, float b2, float step, float inv_c2, float eps,
                             float wd_decay) {
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float decay = in_ranges(ranges, range_count, i) ? wd_decay : 0.0f;
    const float gi = g[i], pi = p[i];
    // m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_minus_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_minus_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    // p -= (step m) / (sqrt(v inv_c2) + eps) + decay p
    const float denom = __fadd_rn(__fsqrt_rn(__fmul_rn(vi, inv_c2)), eps);
    p[i] = __fsub_rn(pi, __fadd_rn(__fdiv_rn(__fmul_rn(step, mi), denom), __fmul_rn(decay, pi)));
  }
}

__global__ void sgd_kernel(float* p, const float* g, float* buf, std::int64_t n, const std::int64_t* ranges,
                           std::int64_t range_count, float lr, float momentum, float wd) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float decay = in_ranges(ranges, range_count, i) ? wd : 0.0f;
    const float pi = p[i];
    float u = decay != 0.0f ? __fadd_rn(g[i], __fmul_rn(pi, decay)) : g[i];  // g + p decay
    if (buf) u = buf[i] = __fadd_rn(__fmul_rn(buf[i], momentum), u);       // buf momentum + u
    p[i] = __fsub_rn(pi, __fmul_rn(u, lr));                                // p - u lr
  }
}

void check_buffers(const char* kernel, std::initializer_list<const Tensor*> buffers, const Tensor& ranges) {
  const Tensor& first = **buffers.begin();
  for (const Tensor* t : buffers)
    DARK_CHECK(t->dtype() == DType::f32 && t->is_contiguous() && t->numel() == first.numel() &&
                   t->device() == first.device(),
               kernel, ": buffer ", t->describe(), " is not a contiguous f32 buffer like ", first.describe());
  DARK_CHECK(!ranges.defined() || (ranges.dtype() == DType::i64 && ranges.is_contiguous() && ranges.dim() == 2 &&
                                   ranges.size(1) == 2 && ranges.device() == first.device()),
             kernel, ": decay ranges ", ranges.describe(), " must be a contiguous (R, 2) i64 tensor on ", first.describe());
}

const std::int64_t* ranges_data(const Tensor& ranges) {
  return ranges.defined() && ranges.numel() > 0 ? ranges.data<std::int64_t>() : nullptr;
}
std::int64_t ranges_count(const Tensor& ranges) { return ranges.defined() ? ranges.numel() / 2 : 0; }

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& decay_ranges,
                const AdamWParams& a) {
  check_buffers("adamw_step", {&param, &grad, &exp_avg, &exp_avg_sq}, decay_ranges);
  const std::int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param);
  launch(adamw_kernel, {grid_for(n), kThreads}, param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
         exp_avg_sq.data<float>(), n, ranges_data(decay_ranges), ranges_count(decay_ranges),
         static_cast<float>(a.beta1), static_cast<float>(a.beta2), static_cast<float>(a.lr / a.bias_correction1),
         static_cast<float>(1.0 / a.bias_correction2), static_cast<float>(a.eps),
         static_cast<float>(a.lr * a.weight_decay));
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const Tensor& decay_ranges, const SgdParams& s) {
  if (s.momentum != 0.0) check_buffers("sgd_step", {&param, &grad, &momentum_buf}, decay_ranges);
  else check_buffers("sgd_step", {&param, &grad}, decay_ranges);
  const std::int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param);
  launch(sgd_kernel, {grid_for(n), kThreads}, param.data<float>(), grad.data<float>(),
         s.momentum != 0.0 ? momentum_buf.data<float>() : nullptr, n, ranges_data(decay_ranges),
         ranges_count(decay_ranges), static_cast<float>(s.lr), static_cast<float>(s.momentum),
         static_cast<float>(s.weight_decay));
}

// One block per chunk, threads striding it, then the block's fixed tree: the order in which
// reduce_rows_block_kernel (reduce.cu) sums a float64 row longer than 1024, so the norm's
// 4096-long chunks keep the bits of the square-then-sum this replaces. __dmul_rn / __dadd_rn: no FMA contraction of acc + v v.
__global__ void chunk_sq_norms_kernel(const float* x, double* out, std::int64_t chunks, std::int64_t chunk) {
  for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const float* xc = x + c * chunk;
    double acc = 0;
    for (std::int64_t i = threadIdx.x; i < chunk; i += blockDim.x) {
      const double v = xc[i];
      acc = __dadd_rn(acc, __dmul_rn(v, v));
    }
    acc = block_reduce(acc, SumOp{});
    if (threadIdx.x == 0) out[c] = acc;
  }
}

void chunk_sq_norms(const Tensor& x, Tensor& out, std::int64_t chunk) {
  DARK_CHECK(chunk > 0 && x.numel() == out.numel() * chunk && x.is_contiguous() && out.is_contiguous() &&
                 out.dtype() == DType::f64 && x.device() == out.device(),
             "chunk_sq_norms: x ", x.describe(), " and out ", out.describe(), " are not ", out.numel(), " chunks of ",
             chunk, " and their contiguous float64 sums");
  const std::int64_t chunks = out.numel();
  if (chunks == 0) return;
  DeviceGuard guard(out);
  launch(chunk_sq_norms_kernel, {grid_for(chunks, 1), kThreads}, x.data<float>(), out.data<double>(), chunks, chunk);
  DARK_CUDA_CHECK_LAUNCH();
}

DARK_REGISTER_KERNEL(adamw_step, cuda, f32, &adamw_step);
DARK_REGISTER_KERNEL(sgd_step, cuda, f32, &sgd_step);
DARK_REGISTER_KERNEL(chunk_sq_norms, cuda, f32, &chunk_sq_norms);

}  // namespace
}  // namespace dark::cuda
