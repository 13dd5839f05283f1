// The basic layers of a Llama-style model. Weights are created by the layer with the
// initialisation the model asks for (see nn/init.h); names follow Hugging Face Llama.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "autograd/ops.h"
#include "core/enum_names.h"
#include "nn/init.h"
#include "nn/module.h"

namespace dark::nn {

// y = x W^T (+ b), W: (out, in) as in PyTorch / Hugging Face checkpoints.
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, const Init& init, bool bias = false);
  Tensor forward(const Tensor& x) const;
  Tensor* weight;
  Tensor* bias = nullptr;
};

// Rows of a (vocab, dim) table.
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t dim, const Init& init);
  Tensor forward(const Tensor& ids) const;
  Tensor* weight;
};

// x / rms(x) * weight over the last axis (fused op).
class RMSNorm : public Module {
 public:
  RMSNorm(std::int64_t dim, double eps, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const;
  // {x + residual, forward(x + residual)} in one pass (add_rms_norm).
  SumAndNorm forward(const Tensor& x, const Tensor& residual) const;
  Tensor* weight;
  double eps;
};

// The gated MLP's activation: SwiGLU (silu gate), GeGLU (exact erf gelu gate) or GeGLU with
// the tanh-approximated gelu (Gemma's gelu_pytorch_tanh).
enum class MlpKind { swiglu, geglu, geglu_tanh };

// Gated MLP: down(act(gate(x)) * up(x)), act = silu (SwiGLU), gelu (GeGLU) or tanh gelu.
class GatedMlp : public Module {
 public:
  GatedMlp(std::int64_t dim, std::int64_t hidden, MlpKind kind, const Init& init, const Init& out_init);
  Tensor forward(const Tensor& x) const;
  Linear gate_proj, up_proj, down_proj;
  MlpKind kind;
};

}  // namespace dark::nn

namespace dark {
template <>
struct EnumNames<nn::MlpKind> {
  static constexpr std::array<std::pair<nn::MlpKind, std::string_view>, 3> table{
      {{nn::MlpKind::swiglu, "swiglu"}, {nn::MlpKind::geglu, "geglu"}, {nn::MlpKind::geglu_tanh, "geglu_tanh"}}};
};
}  // namespace dark
