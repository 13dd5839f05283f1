// Exact causal softmax attention: the fused flash-style op (tiled online softmax, no
// T x T matrix kept), with grouped-query heads; decoding keeps a key/value cache.
#pragma once
#include "nn/attention_kernel.h"

namespace dark::attention {

class SoftmaxAttention final : public nn::AttentionKernel {
 public:
  explicit SoftmaxAttention(const nn::AttentionShape& shape) : shape_(shape) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask = Tensor()) override;
  Tensor decode(const Tensor& q, const Tensor& k, const Tensor& v, std::unique_ptr<nn::DecodeState>& state) override;
  const char* kind() const override { return "softmax"; }
  // Only a sliding-window layer's cache stops growing (at its window).
  bool bounded_decode_state() const override { return shape_.window > 0; }

 private:
  double scale() const;
  nn::AttentionShape shape_;
};

}  // namespace dark::attention
