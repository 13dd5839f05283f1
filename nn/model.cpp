// CausalLM and its blocks (see model.h).
#include "nn/model.h"

#include <cmath>

#include "autograd/ops.h"

namespace dark::nn {

void ModelConfig::validate() const {
  DARK_CHECK(vocab_size > 0, "model: vocab_size must be positive, got ", vocab_size);
  DARK_CHECK(d_model > 0 && n_layers > 0 && n_heads > 0 && d_ff > 0, "model: d_model, n_layers, n_heads and d_ff must be positive");
  DARK_CHECK(d_model % n_heads == 0, "model: n_heads (", n_heads, ") must divide d_model (", d_model, ")");
  DARK_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "model: n_kv_heads (", n_kv_heads, ") must divide n_heads (", n_heads, ")");
  DARK_CHECK(head_dim() % 2 == 0, "model: head dimension d_model / n_heads = ", head_dim(), " must be even for RoPE");
}

namespace {
Init layer_init(const ModelConfig& c, const std::string& name) { return Init{c.init_std, c.seed, name, c.dtype}; }
// Residual output projections: std / sqrt(2 * n_layers) (see nn/init.h).
Init residual_init(const ModelConfig& c, const std::string& name) {
  return Init{c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layers)), c.seed, name, c.dtype};
}
}  // namespace

SelfAttention::SelfAttention(const ModelConfig& c, int layer, const Init& init, const Init& out_init,
                             const AttentionFactory& factory)
    : q_proj(c.d_model, c.n_heads * c.head_dim(), init.with_name(init.name + ".q_proj")),
      k_proj(c.d_model, c.n_kv_heads * c.head_dim(), init.with_name(init.name + ".k_proj")),
      v_proj(c.d_model, c.n_kv_heads * c.head_dim(), init.with_name(init.name + ".v_proj")),
      o_proj(c.n_heads * c.head_dim(), c.d_model, out_init.with_name(out_init.name + ".o_proj")),
      kernel(factory(AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim(), layer})),
      n_heads(c.n_heads), n_kv_heads(c.n_kv_heads), head_dim(c.head_dim()), rope_theta(c.rope_theta) {
  register_module("q_proj", q_proj);
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("o_proj", o_proj);
  register_module("feature_map", *kernel);
}

Tensor SelfAttention::forward(const Tensor& x, std::int64_t position_offset) {
  const std::int64_t B = x.size(0), T = x.size(1);
  const Tensor q = rope(reshape(q_proj.forward(x), {B, T, n_heads, head_dim}), rope_theta, position_offset);
  const Tensor k = rope(reshape(k_proj.forward(x), {B, T, n_kv_heads, head_dim}), rope_theta, position_offset);
  const Tensor v = reshape(v_proj.forward(x), {B, T, n_kv_heads, head_dim});
  return o_proj.forward(reshape(kernel->forward(q, k, v), {B, T, n_heads * head_dim}));
}

DecoderBlock::DecoderBlock(const ModelConfig& c, int layer, const AttentionFactory& factory)
    : input_layernorm(c.d_model, c.norm_eps, c.dtype),
      self_attn(c, layer, layer_init(c, "model.layers." + std::to_string(layer) + ".self_attn"),
                residual_init(c, "model.layers." + std::to_string(layer) + ".self_attn"), factory),
      post_attention_layernorm(c.d_model, c.norm_eps, c.dtype),
      mlp(c.d_model, c.d_ff, c.mlp, layer_init(c, "model.layers." + std::to_string(layer) + ".mlp"),
          residual_init(c, "model.layers." + std::to_string(layer) + ".mlp")),
      dropout_p(c.dropout), seed(c.seed) {
  register_module("input_layernorm", input_layernorm);
  register_module("self_attn", self_attn);
  register_module("post_attention_layernorm", post_attention_layernorm);
  register_module("mlp", mlp);
}

Tensor DecoderBlock::forward(const Tensor& x, std::uint64_t dropout_stream) {
  const bool drop = training() && dropout_p > 0.0;
  Tensor h = self_attn.forward(input_layernorm.forward(x));
  if (drop) h = dropout(h, dropout_p, seed, dropout_stream);
  const Tensor x1 = add(x, h);
  Tensor m = mlp.forward(post_attention_layernorm.forward(x1));
  if (drop) m = dropout(m, dropout_p, seed, dropout_stream + 1);
  return add(x1, m);
}

CausalLM::Inner::Inner(const ModelConfig& c, const AttentionFactory& factory)
    : embed_tokens(c.vocab_size, c.d_model, layer_init(c, "model.embed_tokens")), norm(c.d_model, c.norm_eps, c.dtype) {
  register_module("embed_tokens", embed_tokens);
  for (int i = 0; i < c.n_layers; ++i) {
    layers.push_back(std::make_unique<DecoderBlock>(c, i, factory));
    register_module("layers." + std::to_string(i), *layers.back());
  }
  register_module("norm", norm);
}

CausalLM::CausalLM(const ModelConfig& config, const AttentionFactory& factory)
    : model((config.validate(), config), factory), config_(config) {
  register_module("model", model);
  if (!config.tie_embeddings) {
    lm_head = std::make_unique<Linear>(config.d_model, config.vocab_size, layer_init(config, "lm_head"));
    register_module("lm_head", *lm_head);
  }
}

Tensor CausalLM::forward(const Tensor& ids, std::uint64_t step) {
  DARK_CHECK(ids.dim() == 2, "CausalLM: token ids must be (batch, time), got ", ids.describe());
  Tensor h = model.embed_tokens.forward(ids);
  for (std::size_t i = 0; i < model.layers.size(); ++i)
    h = model.layers[i]->forward(h, (step << 16) + 2 * i + 1);  // distinct dropout stream per (step, layer, site)
  h = model.norm.forward(h);
  const Tensor& head = lm_head ? *lm_head->weight : *model.embed_tokens.weight;
  const std::int64_t B = ids.size(0), T = ids.size(1);
  return reshape(matmul(reshape(h, {B * T, config_.d_model}), head, false, true), {B, T, config_.vocab_size});
}

Tensor CausalLM::loss(const Tensor& tokens, std::uint64_t step) {
  DARK_CHECK(tokens.dim() == 2 && tokens.size(1) >= 2, "CausalLM::loss: tokens must be (batch, time + 1), got ",
             tokens.describe());
  const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
  const Tensor inputs = core::slice(tokens, 1, 0, T).contiguous();
  const Tensor targets = core::reshape(core::slice(tokens, 1, 1, T + 1).contiguous(), {B * T});
  const Tensor logits = forward(inputs, step);
  return cross_entropy(reshape(logits, {B * T, config_.vocab_size}), targets);
}

}  // namespace dark::nn
