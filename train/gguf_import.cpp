// GGUF llama import (see gguf_import.h).
#include "train/gguf_import.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "data/gguf.h"

namespace dark::train {

namespace {

// Our name for a GGUF llama tensor name, or "" for one we do not use.
std::string our_name(const std::string& gguf_name) {
  static const std::map<std::string, std::string> top = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                         {"output_norm.weight", "model.norm.weight"},
                                                         {"output.weight", "lm_head.weight"}};
  if (auto it = top.find(gguf_name); it != top.end()) return it->second;
  static const std::map<std::string, std::string> block = {
      {"attn_norm.weight", "input_layernorm.weight"},     {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},       {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},  {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},        {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (!gguf_name.starts_with("blk.")) return "";
  const std::size_t dot = gguf_name.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string layer = gguf_name.substr(4, dot - 4);
  auto it = block.find(gguf_name.substr(dot + 1));
  if (it == block.end() || layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return "";
  return "model.layers." + layer + "." + it->second;
}

int int_key(const data::GgufFile& file, const std::string& key) {
  const std::int64_t v = file.get_int(key);
  DARK_CHECK(v > 0 && v < (1ll << 31), file.path(), ": ", key, " = ", v, " is out of range");
  return static_cast<int>(v);
}

nn::ModelConfig llama_shape(const data::GgufFile& file) {
  const std::string arch = file.get_string("general.architecture");
  DARK_CHECK(arch == "llama", file.path(), ": general.architecture is \"", arch,
             "\"; only \"llama\" models can be imported");
  nn::ModelConfig m;
  m.d_model = int_key(file, "llama.embedding_length");
  m.n_layers = int_key(file, "llama.block_count");
  m.n_heads = int_key(file, "llama.attention.head_count");
  m.n_kv_heads = file.has("llama.attention.head_count_kv") ? int_key(file, "llama.attention.head_count_kv") : m.n_heads;
  m.d_ff = int_key(file, "llama.feed_forward_length");
  m.mlp = nn::MlpKind::swiglu;
  m.rope_theta = file.has("llama.rope.freq_base") ? file.get_float("llama.rope.freq_base") : 10000.0;
  m.norm_eps = file.get_float("llama.attention.layer_norm_rms_epsilon");
  m.max_seq_len = file.has("llama.context_length") ? int_key(file, "llama.context_length") : 0;
  m.vocab_size = file.has("llama.vocab_size") ? int_key(file, "llama.vocab_size")
                                              : static_cast<int>(file.get_string_array("tokenizer.ggml.tokens").size());
  m.tie_embeddings = file.find_tensor("output.weight") == nullptr;
  DARK_CHECK(m.d_model % m.n_heads == 0, file.path(), ": embedding_length ", m.d_model, " is not a multiple of head_count ",
             m.n_heads);
  if (file.has("llama.rope.dimension_count")) {
    const std::int64_t rope_dims = file.get_int("llama.rope.dimension_count");
    DARK_CHECK(rope_dims == m.d_model / m.n_heads, file.path(), ": llama.rope.dimension_count ", rope_dims,
               " rotates part of each head (head dim ", m.d_model / m.n_heads, "); partial RoPE is not supported");
  }
  return m;
}

}  // namespace

Tensor unpermute_rotary_rows(const Tensor& weight, std::int64_t n_heads) {
  DARK_CHECK(weight.dim() == 2 && weight.size(0) % (2 * n_heads) == 0, "unpermute_rotary_rows: ", weight.describe(),
             " does not split into ", n_heads, " heads of an even dimension");
  const Tensor w = weight.to(DType::f32).contiguous();
  const std::int64_t rows = w.size(0), cols = w.size(1), head_dim = rows / n_heads, half = head_dim / 2;
  Tensor out = Tensor::empty({rows, cols}, DType::f32);
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (std::int64_t h = 0; h < n_heads; ++h)
    for (std::int64_t i = 0; i < half; ++i)
      for (std::int64_t j = 0; j < 2; ++j) {
        const std::int64_t from = h * head_dim + 2 * i + j, to = h * head_dim + j * half + i;
        std::memcpy(dst + to * cols, src + from * cols, sizeof(float) * static_cast<std::size_t>(cols));
      }
  return out;
}

ImportedModel import_gguf_llama(const std::string& path) {
  const data::GgufFile file = data::GgufFile::open(path);
  ImportedModel out;
  out.model = llama_shape(file);
  const nn::ModelConfig& m = out.model;
  for (const data::GgufTensorInfo& info : file.tensors()) {
    const std::string name = our_name(info.name);
    if (name.empty()) {
      spdlog::warn("{}: tensor '{}' is not part of the llama model; ignored", path, info.name);
      continue;
    }
    Tensor t = file.read_f32(info.name);
    if (name.ends_with("q_proj.weight")) t = unpermute_rotary_rows(t, m.n_heads);
    if (name.ends_with("k_proj.weight")) t = unpermute_rotary_rows(t, m.n_kv_heads);
    out.parameters.emplace(name, std::move(t));
  }
  spdlog::info("{}: llama, {} layers, d_model {}, {} heads ({} kv), d_ff {}, vocab {}, {} tensors", path, m.n_layers,
               m.d_model, m.n_heads, m.n_kv_heads, m.d_ff, m.vocab_size, out.parameters.size());
  return out;
}

}  // namespace dark::train
