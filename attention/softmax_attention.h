// Exact causal softmax attention: the fused flash-style op (tiled online softmax, no
// T x T matrix kept), with grouped-query heads.
#pragma once
#include "nn/attention_kernel.h"

namespace dark::attention {

class SoftmaxAttention final : public nn::AttentionKernel {
 public:
  explicit SoftmaxAttention(const nn::AttentionShape& shape) : shape_(shape) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v) override;
  const char* kind() const override { return "softmax"; }

 private:
  nn::AttentionShape shape_;
};

}  // namespace dark::attention
