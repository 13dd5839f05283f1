// Gated activations of the feed-forward block, fused: swiglu = silu(gate) * up,
// geglu = gelu(gate) * up (exact gelu) and geglu_tanh = gelu_tanh(gate) * up (the tanh
// approximation, Hugging Face's gelu_pytorch_tanh). One tape entry; the backward kernel
// recomputes the activation from gate, so only the inputs are saved.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

Tensor glu(GluOp op, const char* name, const Tensor& gate_in, const Tensor& up_in) {
  ops_detail::check_floating(name, gate_in);
  ops_detail::check_same(name, gate_in, up_in);
  DARK_CHECK(gate_in.shape() == up_in.shape(), name, ": gate and up must have the same shape, got ",
             gate_in.describe(), " and ", up_in.describe());
  const Tensor gate = gate_in.contiguous();
  const Tensor up = up_in.contiguous();
  Tensor out = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  kernels::glu_forward().get(gate.device().type, gate.dtype())(op, gate, up, out);
  if (should_record({&gate_in, &up_in})) {
    record(name, {gate_in, up_in}, {&out}, [op, gate = gate.detach(), up = up.detach()](BackwardContext& g) {
      const GluGrads d = glu_backward(op, gate, up, g.out_grad(), g.needs_grad(0), g.needs_grad(1));
      if (d.dgate.defined()) g.set_input_grad(0, d.dgate);
      if (d.dup.defined()) g.set_input_grad(1, d.dup);
    });
  }
  return out;
}

}  // namespace

GluGrads glu_backward(GluOp op, const Tensor& gate, const Tensor& up, const Tensor& dout_in, bool want_gate,
                      bool want_up, bool want_out) {
  const Tensor dout = dout_in.contiguous();
  GluGrads d;
  const auto like_gate = [&gate](bool wanted) {
    return wanted ? Tensor::empty(gate.shape(), gate.dtype(), gate.device()) : Tensor();
  };
  if (want_gate && want_up) {
    // Side by side in one allocation: the gated MLP's input products (linear_group) then take
    // both weight gradients in one batched GEMM.
    Shape both_shape = gate.shape();
    both_shape.insert(both_shape.begin(), 2);
    const Tensor both = Tensor::empty(both_shape, gate.dtype(), gate.device());
    d.dgate = core::reshape(core::slice(both, 0, 0, 1), gate.shape());
    d.dup = core::reshape(core::slice(both, 0, 1, 2), gate.shape());
  } else {
    d.dgate = like_gate(want_gate);
    d.dup = like_gate(want_up);
  }
  d.out = like_gate(want_out);
  kernels::glu_backward().get(gate.device().type, gate.dtype())(op, gate, up, dout, d.dgate, d.dup, d.out);
  return d;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) { return glu(GluOp::swiglu, "swiglu", gate, up); }
Tensor geglu(const Tensor& gate, const Tensor& up) { return glu(GluOp::geglu, "geglu", gate, up); }
Tensor geglu_tanh(const Tensor& gate, const Tensor& up) { return glu(GluOp::geglu_tanh, "geglu_tanh", gate, up); }

}  // namespace dark
