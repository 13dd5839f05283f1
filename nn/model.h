// A Llama-style causal language model: token embedding, N pre-norm decoder blocks
// (RMSNorm -> self-attention with RoPE and grouped-query heads -> residual, RMSNorm ->
// gated MLP -> residual), a final RMSNorm and the LM head (tied to the embedding or not).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention_kernel.h"
#include "nn/layers.h"

namespace dark::nn {

struct ModelConfig {
  std::int64_t vocab_size = 0;
  std::int64_t d_model = 256;
  std::int64_t n_layers = 4;
  std::int64_t n_heads = 4;
  std::int64_t n_kv_heads = 4;
  std::int64_t d_ff = 704;
  GatedMlp::Activation mlp = GatedMlp::Activation::silu;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  double dropout = 0.0;
  double init_std = 0.02;
  std::uint64_t seed = 0;
  DType dtype = DType::f32;  // parameters' dtype (f64 for reference tests)

  std::int64_t head_dim() const { return d_model / n_heads; }
  void validate() const;  // throws naming the inconsistent fields
};

class SelfAttention : public Module {
 public:
  SelfAttention(const ModelConfig& c, int layer, const Init& init, const Init& out_init, const AttentionFactory& factory);
  // x: (B, T, d_model) -> (B, T, d_model); position_offset for decoding with a prefix.
  Tensor forward(const Tensor& x, std::int64_t position_offset = 0);
  Linear q_proj, k_proj, v_proj, o_proj;
  std::unique_ptr<AttentionKernel> kernel;
  std::int64_t n_heads, n_kv_heads, head_dim;
  double rope_theta;
};

class DecoderBlock : public Module {
 public:
  DecoderBlock(const ModelConfig& c, int layer, const AttentionFactory& factory);
  // dropout_stream keys this block's dropout masks (0 when dropout is off).
  Tensor forward(const Tensor& x, std::uint64_t dropout_stream);
  RMSNorm input_layernorm;
  SelfAttention self_attn;
  RMSNorm post_attention_layernorm;
  GatedMlp mlp;
  double dropout_p;
  std::uint64_t seed;
};

class CausalLM : public Module {
 public:
  CausalLM(const ModelConfig& config, const AttentionFactory& factory);
  // ids: (B, T) int -> logits (B, T, vocab). `step` keys dropout masks in training.
  Tensor forward(const Tensor& ids, std::uint64_t step = 0);
  // tokens: (B, T + 1) int: mean next-token cross-entropy of positions 0..T-1.
  Tensor loss(const Tensor& tokens, std::uint64_t step = 0);
  const ModelConfig& config() const { return config_; }

  // The inner model ("model." prefix) holds everything but the untied head.
  struct Inner : Module {
    Inner(const ModelConfig& c, const AttentionFactory& factory);
    Embedding embed_tokens;
    std::vector<std::unique_ptr<DecoderBlock>> layers;
    RMSNorm norm;
  };
  Inner model;
  std::unique_ptr<Linear> lm_head;  // null when tied to model.embed_tokens

 private:
  ModelConfig config_;
};

}  // namespace dark::nn
