// The gated activations for f32, f64 and bf16 (core/kernels.h), elementwise on contiguous
// tensors, with the CPU's formulas (core/cpu/glu.cpp):
//   swiglu: act = g sigmoid(g),          act' = s (1 + g (1 - s)),  s = sigmoid(g)
//   geglu:  act = g Phi(g) (exact gelu),  act' = Phi(g) + g phi(g)
//   geglu_tanh: act = g s,  act' = s + g c (1 + 3 a g^2) 2 s (1 - s),  s = sigmoid(2 c (g + a g^3))
//           = 0.5 (1 + tanh(c (g + a g^3))), c = sqrt(2/pi), a = 0.044715 (tanh-approximated gelu)
// forward out = act(gate) up; backward dgate = dout up act'(gate), dup = dout act(gate),
// either skipped when undefined. The operands move in 16-byte packs (core/cuda/vector_access.cuh).
#include <cstdint>

#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/vector_access.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

template <class A>
__device__ __forceinline__ void act_and_slope(GluOp op, A g, A& act, A& slope) {
  if (op == GluOp::swiglu) {
    const A s = A(1) / (A(1) + dmath::exp(-g));
    act = g * s;
    slope = s * (A(1) + g * (A(1) - s));
  } else if (op == GluOp::geglu_tanh) {
    const A g2 = g * g;
    const A s = A(1) / (A(1) + dmath::exp(A(-2 * 0.79788456080286535588) * (g + A(0.044715) * g2 * g)));
    act = g * s;
    slope = s + g * (A(2 * 0.79788456080286535588) * (A(1) + A(3 * 0.044715) * g2)) * (s * (A(1) - s));
  } else {
    const A cdf = A(0.5) * dmath::erfc(-g * A(0.70710678118654752440));
    const A pdf = A(0.39894228040143267794) * dmath::exp(A(-0.5) * g * g);
    act = g * cdf;
    slope = cdf + g * pdf;
  }
}

template <class T>
__global__ void glu_forward_kernel(GluOp op, const T* gate, const T* up, T* out, std::int64_t n) {
  using A = acc_t<T>;
  const auto f = [op](T g, T u, T& o) {
    A act, slope;
    act_and_slope(op, convert<A>(g), act, slope);
    o = convert<T>(act * convert<A>(u));
  };
  for_each_contiguous(n, f, gate, up, out);
}

// One loop per set of wanted gradients, so that the packs of undefined ones (and of up, which
// only dgate reads) are neither loaded nor stored.
template <class T>
__global__ void glu_backward_kernel(GluOp op, const T* gate, const T* up, const T* dout, T* dgate, T* dup,
                                    std::int64_t n) {
  using A = acc_t<T>;
  const auto grads = [op](T g, T u, T d, T* dg, T* du) {
    A act, slope;
    act_and_slope(op, convert<A>(g), act, slope);
    if (dg) *dg = convert<T>(convert<A>(d) * convert<A>(u) * slope);
    if (du) *du = convert<T>(convert<A>(d) * act);
  };
  if (dgate && dup) {
    for_each_contiguous(n, [&](T g, T u, T d, T& dg, T& du) { grads(g, u, d, &dg, &du); }, gate, up, dout, dgate, dup);
  } else if (dgate) {
    for_each_contiguous(n, [&](T g, T u, T d, T& dg) { grads(g, u, d, &dg, nullptr); }, gate, up, dout, dgate);
  } else {
    for_each_contiguous(n, [&](T g, T d, T& du) { grads(g, T(), d, nullptr, &du); }, gate, dout, dup);
  }
}

template <class T>
void glu_forward(GluOp op, const Tensor& gate, const Tensor& up, Tensor& out) {
  check_dtype<T>("glu_forward", {{"gate", &gate}, {"up", &up}, {"out", &out}});
  const std::int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  launch(glu_forward_kernel<T>, {grid_for_packs<T>(n), kThreads}, op, gate.data<T>(), up.data<T>(), out.data<T>(), n);
}

template <class T>
void glu_backward(GluOp op, const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  check_dtype<T>("glu_backward", {{"gate", &gate}, {"up", &up}, {"dout", &dout}});
  const std::int64_t n = gate.numel();
  if (n == 0 || (!dgate.defined() && !dup.defined())) return;
  DeviceGuard guard(gate);
  launch(glu_backward_kernel<T>, {grid_for_packs<T>(n), kThreads}, op, gate.data<T>(), up.data<T>(), dout.data<T>(),
         dgate.defined() ? dgate.data<T>() : nullptr, dup.defined() ? dup.data<T>() : nullptr, n);
}

DARK_REGISTER_KERNEL(glu_forward, cuda, f32, &glu_forward<float>);
DARK_REGISTER_KERNEL(glu_forward, cuda, f64, &glu_forward<double>);
DARK_REGISTER_KERNEL(glu_forward, cuda, bf16, &glu_forward<BFloat16>);
DARK_REGISTER_KERNEL(glu_backward, cuda, f32, &glu_backward<float>);
DARK_REGISTER_KERNEL(glu_backward, cuda, f64, &glu_backward<double>);
DARK_REGISTER_KERNEL(glu_backward, cuda, bf16, &glu_backward<BFloat16>);

}  // namespace
}  // namespace dark::cuda
