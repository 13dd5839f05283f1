// CausalLM and its blocks (see model.h).
#include "nn/model.h"

#include <algorithm>
#include <cmath>

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::nn {

namespace {
// The resolved config a model is built from; the vocabulary must be known by now.
ModelConfig checked(const ModelConfig& config) {
  const ModelConfig c = config.resolved();
  c.validate();
  DARK_CHECK(c.vocab_size > 0, "config: model.vocab_size: must be set (the tokenizer's vocabulary) before building a model");
  return c;
}

Init layer_init(const ModelConfig& c, const std::string& name) { return Init{c.init_std, c.seed, name, c.dtype}; }
// Residual output projections: std / sqrt(2 * n_layers) (see nn/init.h).
Init residual_init(const ModelConfig& c, const std::string& name) {
  return Init{c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layers)), c.seed, name, c.dtype};
}
}  // namespace

SelfAttention::SelfAttention(const ModelConfig& c, int layer, const Init& init, const Init& out_init,
                             const AttentionFactory& factory)
    : q_proj(c.d_model, c.n_heads * c.head_size(), init.with_name(init.name + ".q_proj")),
      k_proj(c.d_model, c.n_kv_heads * c.head_size(), init.with_name(init.name + ".k_proj")),
      v_proj(c.d_model, c.n_kv_heads * c.head_size(), init.with_name(init.name + ".v_proj")),
      o_proj(c.n_heads * c.head_size(), c.d_model, out_init.with_name(out_init.name + ".o_proj")),
      kernel(factory(AttentionShape{c.n_heads, c.n_kv_heads, c.head_size(), layer, c.dtype, c.window_of(layer)})),
      n_heads(c.n_heads), n_kv_heads(c.n_kv_heads), head_dim(c.head_size()), rope_theta(c.rope_theta_of(layer)) {
  register_module("q_proj", q_proj);
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("o_proj", o_proj);
  if (c.family == ModelFamily::gemma3) {
    q_norm = std::make_unique<RMSNorm>(head_dim, c.norm_eps, c.dtype);
    k_norm = std::make_unique<RMSNorm>(head_dim, c.norm_eps, c.dtype);
    register_module("q_norm", *q_norm);
    register_module("k_norm", *k_norm);
  }
  register_module("feature_map", *kernel);
}

SelfAttention::Heads SelfAttention::project(const Tensor& x, std::int64_t position) {
  const std::int64_t B = x.size(0), T = x.size(1);
  Tensor q = reshape(q_proj.forward(x), {B, T, n_heads, head_dim});
  Tensor k = reshape(k_proj.forward(x), {B, T, n_kv_heads, head_dim});
  if (q_norm) {  // QK-norm comes before the rotation, as in Gemma 3
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  const RopedPair rotated = rope_pair(q, k, rope_theta, position);  // one launch for both
  return {rotated.q, rotated.k, reshape(v_proj.forward(x), {B, T, n_kv_heads, head_dim})};
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& key_mask) {
  if (input_observer) input_observer(x);
  const Heads h = project(x, 0);
  return o_proj.forward(reshape(kernel->forward(h.q, h.k, h.v, key_mask), {x.size(0), x.size(1), n_heads * head_dim}));
}

Tensor SelfAttention::decode(const Tensor& x, std::int64_t position, std::unique_ptr<DecodeState>& state) {
  const Heads h = project(x, position);
  return o_proj.forward(reshape(kernel->decode(h.q, h.k, h.v, state), {x.size(0), x.size(1), n_heads * head_dim}));
}

DecoderBlock::DecoderBlock(const ModelConfig& c, int layer, const AttentionFactory& factory)
    : input_layernorm(c.d_model, c.norm_eps, c.dtype),
      self_attn(c, layer, layer_init(c, "model.layers." + std::to_string(layer) + ".self_attn"),
                residual_init(c, "model.layers." + std::to_string(layer) + ".self_attn"), factory),
      mlp_input_norm(c.d_model, c.norm_eps, c.dtype),
      mlp(c.d_model, c.d_ff, c.mlp, layer_init(c, "model.layers." + std::to_string(layer) + ".mlp"),
          residual_init(c, "model.layers." + std::to_string(layer) + ".mlp")),
      dropout_p(c.dropout), seed(c.seed) {
  register_module("input_layernorm", input_layernorm);
  register_module("self_attn", self_attn);
  if (c.family == ModelFamily::gemma3) {
    attention_output_norm = std::make_unique<RMSNorm>(c.d_model, c.norm_eps, c.dtype);
    mlp_output_norm = std::make_unique<RMSNorm>(c.d_model, c.norm_eps, c.dtype);
    register_module("post_attention_layernorm", *attention_output_norm);
    register_module("pre_feedforward_layernorm", mlp_input_norm);
    register_module("post_feedforward_layernorm", *mlp_output_norm);
  } else {
    register_module("post_attention_layernorm", mlp_input_norm);
  }
  register_module("mlp", mlp);
}

Tensor Residual::sum() const { return branch.defined() ? add(stream, branch) : stream; }

SumAndNorm Residual::normed_by(const RMSNorm& norm) const {
  if (branch.defined()) return norm.forward(stream, branch);  // the add and the norm in one pass
  return {stream, norm.forward(stream)};
}

Residual DecoderBlock::forward(const Residual& in, const RandomStream& dropout_stream, const Tensor& key_mask) {
  const bool drop = training() && dropout_p > 0.0;
  const auto [x, normed_x] = in.normed_by(input_layernorm);
  Tensor h = self_attn.forward(normed_x, key_mask);
  if (attention_output_norm) h = attention_output_norm->forward(h);
  if (drop) h = dropout(h, dropout_p, seed, dropout_stream);
  const auto [x1, normed] = mlp_input_norm.forward(x, h);  // x1 = x + h, and its norm, in one pass
  Tensor m = mlp.forward(normed);
  if (mlp_output_norm) m = mlp_output_norm->forward(m);
  if (drop) m = dropout(m, dropout_p, seed, {dropout_stream.base + 1, dropout_stream.offset});
  return {x1, m};  // added by the next norm
}

Tensor DecoderBlock::forward(const Tensor& x, const RandomStream& dropout_stream, const Tensor& key_mask) {
  return forward(Residual{x, Tensor()}, dropout_stream, key_mask).sum();
}

Tensor DecoderBlock::decode(const Tensor& x, std::int64_t position, std::unique_ptr<DecodeState>& state) {
  Tensor h = self_attn.decode(input_layernorm.forward(x), position, state);
  if (attention_output_norm) h = attention_output_norm->forward(h);
  const auto [x1, normed] = mlp_input_norm.forward(x, h);
  Tensor m = mlp.forward(normed);
  if (mlp_output_norm) m = mlp_output_norm->forward(m);
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
    : config_(checked(config)), model(config_, factory) {
  register_module("model", model);
  if (!config_.tie_embeddings) {
    lm_head = std::make_unique<Linear>(config_.d_model, config_.vocab_size, layer_init(config_, "lm_head"));
    register_module("lm_head", *lm_head);
  }
}

std::vector<AttentionKernel*> CausalLM::attention_kernels() {
  std::vector<AttentionKernel*> out;
  for (auto& layer : model.layers) out.push_back(layer->self_attn.kernel.get());
  return out;
}

std::int64_t CausalLM::decode_context() {
  const std::vector<AttentionKernel*> kernels = attention_kernels();
  const auto growing = std::find_if(kernels.begin(), kernels.end(), [](auto* k) { return !k->bounded_decode_state(); });
  if (growing == kernels.end()) return 0;
  DARK_CHECK(config_.max_seq_len > 0, "CausalLM: layer ", growing - kernels.begin(), " (", (*growing)->describe(),
             ") keeps a growing key/value cache, and model.max_seq_len is 0 (not set): the model's context is unknown");
  return config_.max_seq_len;
}

Tensor CausalLM::logits_of(const Residual& h) {
  const Tensor normed = h.normed_by(model.norm).normed;
  const std::int64_t B = normed.size(0), T = normed.size(1);
  return reshape(head_logits(reshape(normed, {B * T, config_.d_model})), {B, T, config_.vocab_size});
}

Tensor CausalLM::head_logits(const Tensor& hidden_rows) {
  DARK_CHECK(hidden_rows.dim() == 2 && hidden_rows.size(1) == config_.d_model, "CausalLM::head_logits: expected (N, ",
             config_.d_model, ") hidden rows, got ", hidden_rows.describe());
  const Tensor head = to_compute(lm_head ? *lm_head->weight : *model.embed_tokens.weight);
  return matmul(hidden_rows, head, false, true);
}

Tensor CausalLM::final_hidden(const Tensor& ids, const Tensor& key_mask) {
  DARK_CHECK(!training(), "CausalLM::final_hidden runs in eval mode (no dropout)");
  return hidden_states(ids, {0, Tensor()}, key_mask).normed_by(model.norm).normed;
}

Tensor unscored_as_ids(const Tensor& tokens) {
  // -(id + 1) -> id: -1 - x, where x < 0. Built where the tokens are (no host round trip).
  const Tensor zero = Tensor::full({}, 0, tokens.dtype(), tokens.device());
  const Tensor minus_one = Tensor::full({}, -1, tokens.dtype(), tokens.device());
  return where(lt(tokens, zero), sub(minus_one, tokens), tokens);
}

Tensor scored_targets(const Tensor& tokens) {
  const Tensor zero = Tensor::full({}, 0, tokens.dtype(), tokens.device());
  return where(lt(tokens, zero), Tensor::full({}, -100, tokens.dtype(), tokens.device()), tokens);
}

Tensor CausalLM::embed(const Tensor& ids) {
  // An input marked unscored (-(id + 1), see model.h) is the token id all the same.
  const Tensor h = model.embed_tokens.forward(unscored_as_ids(ids));
  // Gemma scales the (tied) embedding up on the way in, by sqrt(d_model); the head reads the
  // table unscaled.
  if (config_.family != ModelFamily::gemma3) return h;
  return mul_scalar(h, std::sqrt(static_cast<double>(config_.d_model)));
}

std::uint64_t dropout_stream_offset(std::uint64_t step) { return step << 16; }

Residual CausalLM::hidden_states(const Tensor& ids, const DropoutKey& dropout, const Tensor& key_mask) {
  DARK_CHECK(ids.dim() == 2, "CausalLM: token ids must be (batch, time), got ", ids.describe());
  DARK_CHECK(!key_mask.defined() || key_mask.shape() == ids.shape(), "CausalLM: key_mask ", key_mask.describe(),
             " must have the token ids' shape ", ids.describe());
  Residual h{embed(ids), Tensor()};
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    DecoderBlock& layer = *model.layers[i];
    // A distinct dropout stream per (step, layer, site).
    const RandomStream stream{dropout_stream_offset(dropout.step) + 2 * i + 1, dropout.device_offset};
    if (!activation_checkpointing || !training()) {
      h = layer.forward(h, stream, key_mask);
      continue;
    }
    // Only the block's input is kept; backward recomputes the block (bit-identical results).
    // The block takes and returns the added stream here: checkpoint keeps one tensor.
    std::vector<Tensor*> params;
    for (const auto& [name, p] : layer.named_parameters()) params.push_back(p);
    h = {checkpoint([&layer, stream, key_mask](const std::vector<Tensor>& in) { return layer.forward(in[0], stream, key_mask); },
                    {h.sum()}, params),
         Tensor()};
  }
  return h;
}

Tensor CausalLM::hidden_states_through(const Tensor& ids, std::size_t layers) {
  DARK_CHECK(!training(), "CausalLM::hidden_states_through runs in eval mode (no dropout)");
  DARK_CHECK(ids.dim() == 2 && layers <= model.layers.size(), "CausalLM::hidden_states_through: ids ", ids.describe(),
             " must be (batch, time) and layers ", layers, " at most ", model.layers.size());
  Residual h{embed(ids), Tensor()};
  for (std::size_t i = 0; i < layers; ++i) h = model.layers[i]->forward(h, RandomStream{2 * i + 1, Tensor()}, Tensor());
  return h.sum();
}

Tensor CausalLM::forward(const Tensor& ids, std::uint64_t step, const Tensor& key_mask) {
  return logits_of(hidden_states(ids, {step, Tensor()}, key_mask));
}

Tensor CausalLM::loss(const Tensor& tokens, std::uint64_t step, const Tensor& padding) {
  return loss(tokens, DropoutKey{step, Tensor()}, padding);
}

Tensor CausalLM::loss(const Tensor& tokens, const DropoutKey& dropout, const Tensor& padding) {
  DARK_CHECK(tokens.dim() == 2 && tokens.size(1) >= 2, "CausalLM::loss: tokens must be (batch, time + 1), got ",
             tokens.describe());
  DARK_CHECK(!padding.defined() || padding.shape() == tokens.shape(), "CausalLM::loss: padding ", padding.describe(),
             " must have the tokens' shape ", tokens.describe());
  const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
  const Tensor inputs = core::slice(tokens, 1, 0, T).contiguous();
  // Targets marked unscored (-(id + 1)) get cross_entropy's ignore index: the mean runs over
  // the scored ones alone.
  Tensor targets = scored_targets(core::reshape(core::slice(tokens, 1, 1, T + 1).contiguous(), {B * T}));
  Tensor key_mask;
  if (padding.defined()) {
    key_mask = core::slice(padding, 1, 0, T).contiguous();
    // Padded targets are never predicted: they get cross_entropy's ignore index. Built where
    // the tokens are, so nothing goes through the host.
    const Tensor real = core::reshape(core::slice(padding, 1, 1, T + 1).contiguous(), {B * T});
    targets = where(real, targets, Tensor::full({}, -100, targets.dtype(), targets.device()));
  }
  // The head and the loss in chunks of tokens: the (B T, V) logits never exist at once.
  const Tensor normed =
      reshape(hidden_states(inputs, dropout, key_mask).normed_by(model.norm).normed, {B * T, config_.d_model});
  // The master weight itself: the op casts it for bf16 and keeps its gradient f32.
  return linear_cross_entropy(normed, lm_head ? *lm_head->weight : *model.embed_tokens.weight, targets);
}

Tensor CausalLM::decode_hidden(const Tensor& ids, DecodeCache& cache) {
  DARK_CHECK(ids.dim() == 2 && ids.size(1) >= 1, "CausalLM::decode: token ids must be (batch, time), got ", ids.describe());
  DARK_CHECK(!training(), "CausalLM::decode: call model.train(false) first (decoding has eval semantics)");
  NoGradGuard no_grad;
  cache.layers.resize(model.layers.size());
  Tensor h = embed(ids);
  for (std::size_t i = 0; i < model.layers.size(); ++i) h = model.layers[i]->decode(h, cache.position, cache.layers[i]);
  cache.position += ids.size(1);
  return Residual{h, Tensor()}.normed_by(model.norm).normed;
}

Tensor CausalLM::decode(const Tensor& ids, DecodeCache& cache) {
  const Tensor normed = decode_hidden(ids, cache);
  NoGradGuard no_grad;
  const std::int64_t B = normed.size(0), T = normed.size(1);
  return reshape(head_logits(reshape(normed, {B * T, config_.d_model})), {B, T, config_.vocab_size});
}

Tensor CausalLM::decode_last(const Tensor& ids, DecodeCache& cache) {
  const Tensor normed = decode_hidden(ids, cache);
  NoGradGuard no_grad;
  const std::int64_t B = normed.size(0), T = normed.size(1);
  return reshape(head_logits(reshape(core::slice(normed, 1, T - 1, T).contiguous(), {B, config_.d_model})),
                 {B, 1, config_.vocab_size});
}

}  // namespace dark::nn
