// The gated activations for f32, f64 and bf16 (core/kernels.h), elementwise on contiguous
// tensors, with the CPU's formulas (core/cpu/glu.cpp):
//   swiglu: act = g sigmoid(g),          act' = s (1 + g (1 - s)),  s = sigmoid(g)
//   geglu:  act = g Phi(g) (exact gelu),  act' = Phi(g) + g phi(g)
//   geglu_tanh: act = g s,  act' = s + g c (1 + 3 a g^2) 2 s (1 - s),  s = sigmoid(2 c (g + a g^3))
//           = 0.5 (1 + tanh(c (g + a g^3))), c = sqrt(2/pi), a = 0.044715 (tanh-approximated gelu)
// forward out = act(gate) up; backward dgate = dout up act'(gate), dup = dout act(gate), and
// out again, each skipped when undefined. The operands move in 16-byte packs (core/cuda/vector_access.cuh).
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

// One kernel per set of wanted outputs (bit flags: 4 dgate, 2 dup, 1 out), so that the packs
// of undefined ones (and of up, which dup alone does not read) are neither loaded nor stored,
// and each set gets the registers it needs (bf16: 32-56, ptxas -v; one kernel with every set
// as a run-time branch took 71 for all of them, which capped the common sets' occupancy). out = act * up rounds as glu_forward_kernel
// does, from the same act: the forward's bits.
template <class T, int kWanted>
__global__ void glu_backward_kernel(GluOp op, const T* gate, const T* up, const T* dout, T* dgate, T* dup, T* out,
                                    std::int64_t n) {
  using A = acc_t<T>;
  const auto outputs = [op](T g, T u, T d, T* dg, T* du, T* o) {
    A act, slope;
    act_and_slope(op, convert<A>(g), act, slope);
    if (dg) *dg = convert<T>(convert<A>(d) * convert<A>(u) * slope);
    if (du) *du = convert<T>(convert<A>(d) * act);
    if (o) *o = convert<T>(act * convert<A>(u));
  };
  if constexpr (kWanted == 7) {
    for_each_contiguous(
        n, [&](T g, T u, T d, T& dg, T& du, T& o) { outputs(g, u, d, &dg, &du, &o); }, gate, up, dout, dgate, dup, out);
  } else if constexpr (kWanted == 6) {
    for_each_contiguous(
        n, [&](T g, T u, T d, T& dg, T& du) { outputs(g, u, d, &dg, &du, nullptr); }, gate, up, dout, dgate, dup);
  } else if constexpr (kWanted == 5) {
    for_each_contiguous(
        n, [&](T g, T u, T d, T& dg, T& o) { outputs(g, u, d, &dg, nullptr, &o); }, gate, up, dout, dgate, out);
  } else if constexpr (kWanted == 4) {
    for_each_contiguous(n, [&](T g, T u, T d, T& dg) { outputs(g, u, d, &dg, nullptr, nullptr); }, gate, up, dout, dgate);
  } else if constexpr (kWanted == 3) {
    for_each_contiguous(
        n, [&](T g, T u, T d, T& du, T& o) { outputs(g, u, d, nullptr, &du, &o); }, gate, up, dout, dup, out);
  } else if constexpr (kWanted == 2) {
    for_each_contiguous(n, [&](T g, T d, T& du) { outputs(g, T(), d, nullptr, &du, nullptr); }, gate, dout, dup);
  } else {
    static_assert(kWanted == 1);
    for_each_contiguous(n, [&](T g, T u, T& o) { outputs(g, u, T(), nullptr, nullptr, &o); }, gate, up, out);
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
void glu_backward(GluOp op, const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup,
                  Tensor& out) {
  check_dtype<T>("glu_backward", {{"gate", &gate}, {"up", &up}});
  const std::int64_t n = gate.numel();
  if (n == 0 || (!dgate.defined() && !dup.defined() && !out.defined())) return;
  const auto data = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
  const auto run = [&](auto kernel) {
    launch(kernel, {grid_for_packs<T>(n), kThreads}, op, gate.data<T>(), up.data<T>(), data(dout), data(dgate),
           data(dup), data(out), n);
  };
  DeviceGuard guard(gate);
  switch ((dgate.defined() ? 4 : 0) | (dup.defined() ? 2 : 0) | (out.defined() ? 1 : 0)) {
    case 7: return run(glu_backward_kernel<T, 7>);
    case 6: return run(glu_backward_kernel<T, 6>);
    case 5: return run(glu_backward_kernel<T, 5>);
    case 4: return run(glu_backward_kernel<T, 4>);
    case 3: return run(glu_backward_kernel<T, 3>);
    case 2: return run(glu_backward_kernel<T, 2>);
    default: return run(glu_backward_kernel<T, 1>);
  }
}

DARK_REGISTER_KERNEL(glu_forward, cuda, f32, &glu_forward<float>);
DARK_REGISTER_KERNEL(glu_forward, cuda, f64, &glu_forward<double>);
DARK_REGISTER_KERNEL(glu_forward, cuda, bf16, &glu_forward<BFloat16>);
DARK_REGISTER_KERNEL(glu_backward, cuda, f32, &glu_backward<float>);
DARK_REGISTER_KERNEL(glu_backward, cuda, f64, &glu_backward<double>);
DARK_REGISTER_KERNEL(glu_backward, cuda, bf16, &glu_backward<BFloat16>);

}  // namespace
}  // namespace dark::cuda
