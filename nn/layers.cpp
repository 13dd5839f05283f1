// Linear, Embedding, RMSNorm, gated MLP.
#include "nn/layers.h"

#include "autograd/grad_mode.h"
#include "core/hash.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "autograd/weights.h"

namespace dark::nn {

std::uint64_t name_stream(const std::string& name) { return fnv1a64(name, kNameHashStart); }

namespace {
thread_local bool skip_initialisation = false;
}  // namespace

SkipInitialisation::SkipInitialisation() : previous_(skip_initialisation) { skip_initialisation = true; }
SkipInitialisation::~SkipInitialisation() { skip_initialisation = previous_; }

Tensor normal_init(const Shape& shape, const Init& init) {
  if (skip_initialisation) return Tensor::empty(shape, init.dtype);
  NoGradGuard no_grad;
  return mul_scalar(Tensor::randn(shape, init.seed, name_stream(init.name), init.dtype), init.std);
}

Linear::Linear(std::int64_t in_features, std::int64_t out_features, const Init& init, bool with_bias) {
  weight = &register_parameter("weight", normal_init({out_features, in_features}, init.with_name(init.name + ".weight")));
  if (with_bias) bias = &register_parameter("bias", Tensor::zeros({out_features}, init.dtype));
}

Tensor Linear::forward(const Tensor& x) const {
  // (..., in) x (out, in)^T: one gemm over all leading axes. The master weight itself goes
  // in (linear casts it for bf16 x and keeps its gradient f32).
  Shape flat_shape = {x.numel() / x.shape().back(), x.shape().back()};
  Tensor y = linear(reshape(x, flat_shape), *weight);
  if (bias) y = add(y, to_compute(*bias));
  Shape out_shape = x.shape();
  out_shape.back() = weight->shape()[0];
  return reshape(y, out_shape);
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim, const Init& init) {
  weight = &register_parameter("weight", normal_init({num_embeddings, dim}, init.with_name(init.name + ".weight")));
}

// Rows in the compute dtype: under mixed precision gathered from the step's bf16 copy of the
// weights, or gathered and then cast outside a step, never the table cast (autograd/ops.h).
Tensor Embedding::forward(const Tensor& ids) const {
  return embedding(*weight, ids, compute_dtype().value_or(weight->dtype()));
}

RMSNorm::RMSNorm(std::int64_t dim, double eps_, DType dtype) : eps(eps_) {
  weight = &register_parameter("weight", Tensor::ones({dim}, dtype));
}

// The f32 weight itself: the op multiplies by the step's bf16 copy of it and gives it an f32
// gradient (autograd/ops/rms_norm.cpp), where a recorded cast cost a kernel each way.
Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, *weight, eps); }
SumAndNorm RMSNorm::forward(const Tensor& x, const Tensor& residual) const {
  return add_rms_norm(x, residual, *weight, eps);
}

GatedMlp::GatedMlp(std::int64_t dim, std::int64_t hidden, MlpKind kind_, const Init& init, const Init& out_init)
    : gate_proj(dim, hidden, init.with_name(init.name + ".gate_proj")),
      up_proj(dim, hidden, init.with_name(init.name + ".up_proj")),
      down_proj(hidden, dim, out_init.with_name(out_init.name + ".down_proj")),
      kind(kind_) {
  register_module("gate_proj", gate_proj);
  register_module("up_proj", up_proj);
  register_module("down_proj", down_proj);
}

namespace {
GluOp glu_op(MlpKind kind) {
  switch (kind) {
    case MlpKind::swiglu: return GluOp::swiglu;
    case MlpKind::geglu: return GluOp::geglu;
    case MlpKind::geglu_tanh: return GluOp::geglu_tanh;
  }
  throw Error(str("GatedMlp: unknown MLP kind ", static_cast<int>(kind)));
}

Tensor activation(MlpKind kind, const Tensor& gate, const Tensor& up) {
  switch (kind) {
    case MlpKind::swiglu: return swiglu(gate, up);
    case MlpKind::geglu: return geglu(gate, up);
    case MlpKind::geglu_tanh: return geglu_tanh(gate, up);
  }
  throw Error(str("GatedMlp: unknown MLP kind ", static_cast<int>(kind)));
}
}  // namespace

// down(act(gate, up)) as one tape entry that keeps gate and up (which act's backward needs
// anyway) but not the (rows, hidden) activation, which down_proj's weight gradient would
// otherwise keep: backward recomputes it inside act's backward (glu_backward writes it with
// the forward's bits beside dgate and dup, so gate and up are read once) and runs the products
// as the separate ops would: the gradients are the same bits. Saves one (rows, hidden) tensor
// per layer of training memory. No nested tape: its leaves would take f32 gradients, two
// casts of a (rows, hidden) tensor each for gate and up in bf16.
Tensor GatedMlp::forward(const Tensor& x) const {
  // gate_proj and up_proj (built without biases) as one op: one batched product
  // where their weights lie side by side, as in a ParameterBuffer (autograd/ops/linear_group.cpp).
  Shape hidden_shape = x.shape();
  hidden_shape.back() = gate_proj.weight->size(0);
  const std::vector<Tensor> gate_up =
      linear_group(reshape(x, {x.numel() / x.shape().back(), x.shape().back()}), {*gate_proj.weight, *up_proj.weight});
  const Tensor gate = reshape(gate_up[0], hidden_shape), up = reshape(gate_up[1], hidden_shape);
  const Tensor& weight = *down_proj.weight;
  auto down = [](const Tensor& h, const Tensor& w) {  // down_proj.forward (no bias: see the constructor)
    Shape out_shape = h.shape();
    out_shape.back() = w.size(0);
    return reshape(linear(reshape(h, {h.numel() / h.shape().back(), h.shape().back()}), w), out_shape);
  };
  if (!should_record({&gate, &up, &weight})) return down(activation(kind, gate, up), weight);
  // The master weight is the recorded input (its gradient stays f32: autograd/weights.h);
  // the products use one copy cast to the activations' dtype, kept for dh.
  const Tensor w = weight_for("gated_mlp_down", weight, gate.dtype(), gate.device());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = down(activation(kind, gate, up), w);
  }
  record("gated_mlp_down", {gate, up, weight}, {&out},
         [gate = gate.contiguous().detach(), up = up.contiguous().detach(), w = w.detach(),
          weight_dtype = weight.dtype(), kind = kind](BackwardContext& g) {
           NoGradGuard no_grad;
           const std::int64_t hidden = gate.shape().back(), dim = w.size(0);
           const Tensor dy = reshape(g.out_grad(), {g.out_grad().numel() / dim, dim});
           Tensor h;  // the activation, recomputed (unrecorded)
           if (g.needs_grad(0) || g.needs_grad(1)) {
             const Tensor dh = reshape(matmul(dy, w), gate.shape());
             const GluGrads d =
                 glu_backward(glu_op(kind), gate, up, dh, g.needs_grad(0), g.needs_grad(1), g.needs_grad(2));
             if (d.dgate.defined()) g.set_input_grad(0, d.dgate);
             if (d.dup.defined()) g.set_input_grad(1, d.dup);
             h = d.out;
           } else if (g.needs_grad(2)) {
             h = activation(kind, gate, up);
           }
           if (g.needs_grad(2)) set_weight_grad(g, 2, dy.contiguous(), reshape(h, {h.numel() / hidden, hidden}), weight_dtype);
         });
  return out;
}

}  // namespace dark::nn
