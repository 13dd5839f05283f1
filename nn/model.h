// A Llama-style causal language model: token embedding, N pre-norm decoder blocks
// (RMSNorm -> self-attention with RoPE and grouped-query heads -> residual, RMSNorm ->
// gated MLP -> residual), a final RMSNorm and the LM head (tied to the embedding or not).
//
// The gemma3 family changes, as Gemma 3 does: the embedding output is scaled by
// sqrt(d_model); attention and MLP outputs are normed again before their residual add
// ("sandwich" norms: post_attention_layernorm, pre_ and post_feedforward_layernorm in Hugging
// Face's names); q and k are RMS-normed over the head dimension before RoPE (q_norm, k_norm);
// layers alternate sliding-window ("local", model.sliding_window keys back, RoPE base
// model.rope_local_theta) and full ("global", every model.sliding_window_pattern-th layer,
// RoPE base model.rope_theta) attention. RMSNorm weights are the multipliers themselves
// everywhere (Gemma's checkpoints store w with the multiplier 1 + w; import and export shift).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention_kernel.h"
#include "nn/layers.h"

namespace dark::nn {

enum class ModelFamily { llama, gemma3 };

// The model section of a run config, owned here; the run config's schema (train/config.cpp)
// binds its rows to these members ("model.d_model" is d_model). 0 marks the auto values.
struct ModelConfig {
  ModelFamily family = ModelFamily::llama;
  int vocab_size = 0;           // token vocabulary size; 0 = the tokenizer's (the run sets it before building)
  int d_model = 256;            // width of the residual stream
  int n_layers = 4;             // decoder blocks
  int n_heads = 4;              // query heads per attention layer
  int n_kv_heads = 0;           // key/value heads (grouped-query attention); 0 = n_heads
  int head_dim = 0;             // per-head width of q, k and v; 0 = d_model / n_heads
  int d_ff = 0;                 // gated-MLP hidden width; 0 = auto_d_ff(d_model)
  MlpKind mlp = MlpKind::swiglu;
  double rope_theta = 10000.0;  // RoPE base frequency
  double norm_eps = 1e-5;       // RMSNorm epsilon
  bool tie_embeddings = true;   // lm_head shares the token-embedding matrix
  double dropout = 0.0;         // dropout probability, in [0, 1)
  double init_std = 0.02;       // standard deviation of the normal weight initialisation
  int max_seq_len = 0;          // longest sequence (exported as max_position_embeddings); 0 = the data's seq_len, set by the run
  // gemma3 only: sliding-window layers.
  int sliding_window = 512;          // keys a local layer's query sees, itself included
  int sliding_window_pattern = 6;    // every n-th layer (n-1, 2n-1, ...) is global; the others local
  double rope_local_theta = 10000.0; // RoPE base of the local layers

  // Not config keys: set by whoever builds the model.
  std::uint64_t seed = 0;    // the run's seed: keys the initialisation and dropout streams
  DType dtype = DType::f32;  // parameters' dtype (f64 for reference tests)

  std::int64_t head_size() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  // Whether `layer` attends through a sliding window (a gemma3 local layer); its window size
  // and RoPE base.
  bool is_local_layer(int layer) const;
  std::int64_t window_of(int layer) const { return is_local_layer(layer) ? sliding_window : 0; }
  double rope_theta_of(int layer) const { return is_local_layer(layer) ? rope_local_theta : rope_theta; }
  // A copy with the auto values n_kv_heads and d_ff filled in (head_dim stays 0 = auto:
  // head_size() resolves it).
  ModelConfig resolved() const;
  // The shape rules (n_heads divides d_model unless head_dim is given, an even head dimension
  // for RoPE, n_kv_heads divides n_heads, a positive window and pattern for gemma3), on the
  // resolved values; errors read "config: model.KEY: ...".
  void validate() const;
};

// The d_ff that 0 resolves to: the multiple of 64 nearest 8/3 d_model (ties up), at least 64.
int auto_d_ff(int d_model);

class SelfAttention : public Module {
 public:
  SelfAttention(const ModelConfig& c, int layer, const Init& init, const Init& out_init, const AttentionFactory& factory);
  // x: (B, T, d_model) -> (B, T, d_model). key_mask: undefined or (B, T), zero at padding.
  Tensor forward(const Tensor& x, const Tensor& key_mask = Tensor());
  // The T positions of x that follow the `position` positions `state` has seen.
  Tensor decode(const Tensor& x, std::int64_t position, std::unique_ptr<DecodeState>& state);
  Linear q_proj, k_proj, v_proj, o_proj;
  std::unique_ptr<RMSNorm> q_norm, k_norm;  // gemma3's QK-norm over the head dimension; null otherwise
  std::unique_ptr<AttentionKernel> kernel;
  std::int64_t n_heads, n_kv_heads, head_dim;
  double rope_theta;
  // When set, forward() first hands it the layer's input x (B, T, d_model): attention
  // transfer computes its targets from the same input with the source's projections
  // (train/swap/source_attention.h).
  std::function<void(const Tensor& x)> input_observer;

  // Queries and keys (RoPE from `position` on) and values of x, split into heads.
  struct Heads {
    Tensor q, k, v;
  };
  Heads project(const Tensor& x, std::int64_t position);
};

// The residual stream between decoder blocks: stream + branch, the add not yet done. A block
// ends with x1 + mlp(...); the next block's input norm (or the final norm) adds the two in its
// own pass (add_rms_norm), with the bits of adding first: per layer one write and read of the
// stream fewer forward, and no separate sum of its two gradients backward. branch is
// undefined where there is nothing to add.
struct Residual {
  Tensor stream, branch;
  Tensor sum() const;
  // norm(stream + branch), and the sum (what the residual add would have returned).
  SumAndNorm normed_by(const RMSNorm& norm) const;
};

class DecoderBlock : public Module {
 public:
  DecoderBlock(const ModelConfig& c, int layer, const AttentionFactory& factory);
  // dropout_stream keys this block's dropout masks (its two sites use it and the next stream).
  Residual forward(const Residual& x, const RandomStream& dropout_stream, const Tensor& key_mask = Tensor());
  // The same with the residual add done: x + block(x).
  Tensor forward(const Tensor& x, const RandomStream& dropout_stream, const Tensor& key_mask = Tensor());
  Tensor decode(const Tensor& x, std::int64_t position, std::unique_ptr<DecodeState>& state);
  RMSNorm input_layernorm;
  SelfAttention self_attn;
  std::unique_ptr<RMSNorm> attention_output_norm;  // gemma3: post_attention_layernorm; null for llama
  RMSNorm mlp_input_norm;  // llama: post_attention_layernorm; gemma3: pre_feedforward_layernorm
  GatedMlp mlp;
  std::unique_ptr<RMSNorm> mlp_output_norm;  // gemma3: post_feedforward_layernorm; null for llama
  double dropout_p;
  std::uint64_t seed;
};

// What incremental decoding keeps: one attention state per layer and the position count.
struct DecodeCache {
  std::vector<std::unique_ptr<DecodeState>> layers;
  std::int64_t position = 0;  // tokens seen so far
};

// What keys a training forward's dropout masks: the step (the micro-batch index), and in a
// CUDA graph an i64 scalar on the device that holds dropout_stream_offset of the step the
// launch runs (written at each launch: train/step_graph.h), the step then 0.
struct DropoutKey {
  std::uint64_t step = 0;
  Tensor device_offset;
};
// Where step `step`'s dropout streams start: layer i's two sites use this plus 2 i + 1 and 2 i + 2.
std::uint64_t dropout_stream_offset(std::uint64_t step);

// Scored targets, in band. A batch of token ids (B, T + 1) may mark an entry as "token id,
// but its prediction is not scored" by storing -(id + 1) (negative, so never a real id):
// synthetic tasks such as MQAR (data/mqar.h) score only some positions (the recalled values)
// and mark the rest. The convention rides in the batch itself, so the loaders, the training
// step, its CUDA graph and data parallelism carry it without a second tensor; a mask tensor
// would have had to go through each of them. Where the model reads ids (embed: forward,
// loss, decoding) a marked entry is its id; as a target of loss() it is ignored; evaluate()
// leaves it out of every mean. Text batches have no negative entries, so nothing changes for them.
// unscored_as_ids: the ids of such a tensor (x < 0 -> -1 - x). scored_targets: the same
// tensor with marked entries replaced by cross_entropy's ignore index -100.
Tensor unscored_as_ids(const Tensor& tokens);
Tensor scored_targets(const Tensor& tokens);

class CausalLM : public Module {
 public:
  CausalLM(const ModelConfig& config, const AttentionFactory& factory);
  // ids: (B, T) int -> logits (B, T, vocab). `step` keys dropout masks in training.
  // key_mask: undefined, or (B, T) with zeros at padding (batches of variable-length documents).
  Tensor forward(const Tensor& ids, std::uint64_t step = 0, const Tensor& key_mask = Tensor());
  // tokens: (B, T + 1) int: mean next-token cross-entropy of positions 0..T-1. padding:
  // undefined, or (B, T + 1) with zeros at padded tokens, which are masked as keys and
  // never predicted. An entry -(id + 1) is token `id` not scored (see unscored_as_ids): the
  // mean runs over the scored targets only (0 when none is).
  Tensor loss(const Tensor& tokens, std::uint64_t step = 0, const Tensor& padding = Tensor());
  Tensor loss(const Tensor& tokens, const DropoutKey& dropout, const Tensor& padding = Tensor());
  // Incremental decoding (no gradient, eval semantics): ids (B, T) are the tokens after the
  // cache.position already seen -> their logits (B, T, vocab); equals forward() on the whole
  // sequence at those positions. Softmax keeps keys and values; the random-feature kinds keep
  // an O(1) recurrent state per layer.
  Tensor decode(const Tensor& ids, DecodeCache& cache);
  // The same, but only the last position's logits (B, 1, vocab): what sampling needs. A
  // 4096-token prompt through Gemma 3's 262k-token head would otherwise be 4 GiB of logits.
  Tensor decode_last(const Tensor& ids, DecodeCache& cache);
  // What decode's logits come from: the final-normed hidden states (B, T, d_model), the cache
  // advanced the same way. With head_logits, a caller takes the logits of the rows it needs
  // (a prompt's last) without (B, T, vocab) for the whole prompt.
  Tensor decode_hidden(const Tensor& ids, DecodeCache& cache);
  // The context decode() may run to: 0 (no limit) when every layer's decoding state is
  // bounded (AttentionKernel::bounded_decode_state), else config().max_seq_len, the length
  // the model was trained at (past it a key/value cache keeps growing and RoPE extrapolates).
  // Throws when some layer's state grows and max_seq_len is 0 (not set).
  std::int64_t decode_context();
  const ModelConfig& config() const { return config_; }
  // Recompute each decoder block during backward instead of keeping its activations (in
  // training mode; training.activation_checkpointing).
  bool activation_checkpointing = false;
  // Every layer's attention kernel, by layer.
  std::vector<AttentionKernel*> attention_kernels();
  // The residual stream after the first `layers` decoder blocks (no final norm, no head), in
  // eval semantics: what attention transfer (train/swap/transfer.h) runs its layers' inputs through.
  Tensor hidden_states_through(const Tensor& ids, std::size_t layers);
  // What the LM head reads: the final-normed hidden states (B, T, d_model) of ids, in eval
  // semantics. With head_logits, a caller takes the logits of the rows it needs, a few at a
  // time: all of them at once are (B, T, vocab), 4 GiB for Gemma 3's 262k-token vocabulary
  // at 4096 positions.
  Tensor final_hidden(const Tensor& ids, const Tensor& key_mask = Tensor());
  // Hidden rows (N, d_model), as final_hidden gives them -> logits (N, vocab).
  Tensor head_logits(const Tensor& hidden_rows);

  // The inner model ("model." prefix) holds everything but the untied head.
  struct Inner : Module {
    Inner(const ModelConfig& c, const AttentionFactory& factory);
    Embedding embed_tokens;
    std::vector<std::unique_ptr<DecoderBlock>> layers;
    RMSNorm norm;
  };

 private:
  ModelConfig config_;  // resolved and validated; declared before the layers, which are built from it

 public:
  Inner model;
  std::unique_ptr<Linear> lm_head;  // null when tied to model.embed_tokens

 private:
  // The last decoder block's output (B, T, d_model), its residual add not yet done.
  Residual hidden_states(const Tensor& ids, const DropoutKey& dropout, const Tensor& key_mask);
  Tensor logits_of(const Residual& hidden);  // final norm and LM head
  Tensor embed(const Tensor& ids);         // token embeddings, scaled for gemma3
};

}  // namespace dark::nn

namespace dark {
template <>
struct EnumNames<nn::ModelFamily> {
  static constexpr std::array<std::pair<nn::ModelFamily, std::string_view>, 2> table{
      {{nn::ModelFamily::llama, "llama"}, {nn::ModelFamily::gemma3, "gemma3"}}};
};
}  // namespace dark
