// CPU kernels of the gated activations swiglu (silu(gate) * up), geglu (exact
// gelu(gate) * up) and geglu_tanh (tanh-approximated gelu(gate) * up), forward and
// backward. The float32 loops are compiled for several instruction sets like
// core/cpu/elementwise.cpp and use the vectorisable vmath functions; float64 (for
// gradchecks) uses libm through the same scalar formulas.
//
// geglu_tanh: act = 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), evaluated as
// act = g s with s = 0.5 (1 + tanh(u)) = sigmoid(2u) (the same function; the sigmoid keeps
// full relative accuracy in the negative tail, where 1 + tanh(u) cancels: f32 relative
// error ~1e-6 against the float64 formula on [-4, 4], 1e-3 for the tanh form), and
// act' = s + g sqrt(2/pi) (1 + 3 0.044715 g^2) 2 s (1 - s)   (1 - tanh^2 u = 4 s (1 - s)),
// the same form as the elementwise gelu_tanh op (core/cpu/scalar_ops.h).
#include <cstdint>

#include "core/cpu/parallel.h"
#include "core/cpu/scalar_ops.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

#define DARK_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

// act(g) and act'(g) for one element.
template <GluOp Op, class C>
DARK_INLINE C glu_act(C g) {
  if constexpr (Op == GluOp::swiglu) return g * vmath::sigmoid(g);
  else if constexpr (Op == GluOp::geglu_tanh) {
    const C g2 = g * g;  // the same roundings as glu_act_and_slope
    return g * vmath::sigmoid(C(2 * kSqrt2OverPi) * (g + C(kGeluTanhCubic) * g2 * g));
  } else {
    return C(0.5) * g * vmath::erfc(-g * C(kSqrtHalf));
  }
}

template <GluOp Op, class C>
DARK_INLINE void glu_act_and_slope(C g, C& act, C& slope) {
  if constexpr (Op == GluOp::swiglu) {
    const C s = vmath::sigmoid(g);
    act = g * s;
    slope = s * (C(1) + g * (C(1) - s));
  } else if constexpr (Op == GluOp::geglu_tanh) {
    const C g2 = g * g;
    const C s = vmath::sigmoid(C(2 * kSqrt2OverPi) * (g + C(kGeluTanhCubic) * g2 * g));
    act = g * s;
    slope = s + g * (C(2 * kSqrt2OverPi) * (C(1) + C(3 * kGeluTanhCubic) * g2)) * (s * (C(1) - s));
  } else {
    const C e = vmath::erfc(-g * C(kSqrtHalf));
    const C cdf = C(0.5) * e;
    const C pdf = C(kInvSqrt2Pi) * vmath::exp(C(-0.5) * g * g);
    act = C(0.5) * g * e;  // glu_act's roundings (g cdf differs where cdf is subnormal)
    slope = cdf + g * pdf;
  }
}

template <GluOp Op, class C>
DARK_INLINE void glu_forward_loop(const C* gate, const C* up, C* out, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) out[i] = glu_act<Op>(gate[i]) * up[i];
}

// The wanted outputs (dgate, dup, and out: the forward's output again, same bits) as template
// flags, so that no loop branches and none computes act' without dgate.
template <GluOp Op, bool kGate, bool kUp, bool kOut, class C>
DARK_INLINE void glu_backward_loop(const C* gate, const C* up, const C* dout, C* dgate, C* dup, C* out,
                                   std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    C act, slope;
    if constexpr (kGate) glu_act_and_slope<Op>(gate[i], act, slope);
    else act = glu_act<Op>(gate[i]);
    if constexpr (kGate) dgate[i] = dout[i] * up[i] * slope;
    if constexpr (kUp) dup[i] = dout[i] * act;
    if constexpr (kOut) out[i] = act * up[i];
  }
}

template <GluOp Op, class C>
DARK_INLINE void glu_backward_op(const C* gate, const C* up, const C* dout, C* dgate, C* dup, C* out,
                                 std::int64_t n) {
  const int wanted = (dgate ? 4 : 0) | (dup ? 2 : 0) | (out ? 1 : 0);
  switch (wanted) {
    case 7: return glu_backward_loop<Op, true, true, true>(gate, up, dout, dgate, dup, out, n);
    case 6: return glu_backward_loop<Op, true, true, false>(gate, up, dout, dgate, dup, out, n);
    case 5: return glu_backward_loop<Op, true, false, true>(gate, up, dout, dgate, dup, out, n);
    case 4: return glu_backward_loop<Op, true, false, false>(gate, up, dout, dgate, dup, out, n);
    case 3: return glu_backward_loop<Op, false, true, true>(gate, up, dout, dgate, dup, out, n);
    case 2: return glu_backward_loop<Op, false, true, false>(gate, up, dout, dgate, dup, out, n);
    case 1: return glu_backward_loop<Op, false, false, true>(gate, up, dout, dgate, dup, out, n);
    default: return;
  }
}

// The loops of op, chosen once per chunk.
template <class C>
DARK_INLINE void glu_forward_any(GluOp op, const C* gate, const C* up, C* out, std::int64_t n) {
  switch (op) {
    case GluOp::swiglu: return glu_forward_loop<GluOp::swiglu>(gate, up, out, n);
    case GluOp::geglu: return glu_forward_loop<GluOp::geglu>(gate, up, out, n);
    case GluOp::geglu_tanh: return glu_forward_loop<GluOp::geglu_tanh>(gate, up, out, n);
  }
}
template <class C>
DARK_INLINE void glu_backward_any(GluOp op, const C* gate, const C* up, const C* dout, C* dgate, C* dup, C* out,
                                  std::int64_t n) {
  switch (op) {
    case GluOp::swiglu: return glu_backward_op<GluOp::swiglu>(gate, up, dout, dgate, dup, out, n);
    case GluOp::geglu: return glu_backward_op<GluOp::geglu>(gate, up, dout, dgate, dup, out, n);
    case GluOp::geglu_tanh: return glu_backward_op<GluOp::geglu_tanh>(gate, up, dout, dgate, dup, out, n);
  }
}

DARK_CPU_CLONES void glu_forward_f32(GluOp op, const float* gate, const float* up, float* out, std::int64_t n) {
  glu_forward_any(op, gate, up, out, n);
}

DARK_CPU_CLONES void glu_backward_f32(GluOp op, const float* gate, const float* up, const float* dout, float* dgate,
                                      float* dup, float* out, std::int64_t n) {
  glu_backward_any(op, gate, up, dout, dgate, dup, out, n);
}

void check_op(const char* name, GluOp op) {
  DARK_CHECK(op == GluOp::swiglu || op == GluOp::geglu || op == GluOp::geglu_tanh, name, ": unknown GluOp ",
             static_cast<int>(op));
}

template <class T>
void glu_forward_kernel(GluOp op, const Tensor& gate, const Tensor& up, Tensor& out) {
  const T* pg = gate.data<T>();
  const T* pu = up.data<T>();
  T* po = out.data<T>();
  check_op("glu_forward", op);
  parallel_for(out.numel(), kGrainHeavy, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>) glu_forward_f32(op, pg + begin, pu + begin, po + begin, end - begin);
    else glu_forward_any(op, pg + begin, pu + begin, po + begin, end - begin);
  });
}

template <class T>
void glu_backward_kernel(GluOp op, const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                         Tensor& dup, Tensor& out) {
  const T* pg = gate.data<T>();
  const T* pu = up.data<T>();
  const T* pd = dout.defined() ? dout.data<T>() : nullptr;
  T* pdg = dgate.defined() ? dgate.data<T>() : nullptr;
  T* pdu = dup.defined() ? dup.data<T>() : nullptr;
  T* po = out.defined() ? out.data<T>() : nullptr;
  check_op("glu_backward", op);
  parallel_for(gate.numel(), kGrainHeavy, [&](std::int64_t begin, std::int64_t end) {
    const auto at = [begin](auto* p) { return p ? p + begin : nullptr; };
    if constexpr (std::is_same_v<T, float>)
      glu_backward_f32(op, pg + begin, pu + begin, at(pd), at(pdg), at(pdu), at(po), end - begin);
    else
      glu_backward_any(op, pg + begin, pu + begin, at(pd), at(pdg), at(pdu), at(po), end - begin);
  });
}

DARK_REGISTER_KERNEL(glu_forward, cpu, f32, glu_forward_kernel<float>);
DARK_REGISTER_KERNEL(glu_forward, cpu, f64, glu_forward_kernel<double>);
DARK_REGISTER_KERNEL(glu_backward, cpu, f32, glu_backward_kernel<float>);
DARK_REGISTER_KERNEL(glu_backward, cpu, f64, glu_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
