// GGUF model import (see gguf_import.h).
#include "train/formats/gguf_import.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "core/enum_names.h"

#include "data/gguf.h"

namespace dark::formats {

namespace {

// Our name for a GGUF tensor name of the architecture, or "" for one we do not use. The
// blocks' norms differ: llama's ffn_norm is the pre-MLP norm Hugging Face Llama calls
// post_attention_layernorm; Gemma 3 names that one pre_feedforward_layernorm and uses
// post_attention_layernorm for the norm on the attention output.
std::string our_name(const std::string& gguf_name, nn::ModelFamily family) {
  static const std::map<std::string, std::string> top = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                         {"output_norm.weight", "model.norm.weight"},
                                                         {"output.weight", "lm_head.weight"}};
  if (auto it = top.find(gguf_name); it != top.end()) return it->second;
  static const std::map<std::string, std::string> block = {
      {"attn_norm.weight", "input_layernorm.weight"},     {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},       {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},  {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},            {"ffn_down.weight", "mlp.down_proj.weight"}};
  static const std::map<std::string, std::string> llama_block = {{"ffn_norm.weight", "post_attention_layernorm.weight"}};
  static const std::map<std::string, std::string> gemma3_block = {
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};
  if (!gguf_name.starts_with("blk.")) return "";
  const std::size_t dot = gguf_name.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string layer = gguf_name.substr(4, dot - 4), rest = gguf_name.substr(dot + 1);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return "";
  const auto& own = family == nn::ModelFamily::gemma3 ? gemma3_block : llama_block;
  for (const auto* table : {&block, &own})
    if (auto it = table->find(rest); it != table->end()) return "model.layers." + layer + "." + it->second;
  return "";
}

int int_key(const data::GgufFile& file, const std::string& key) {
  const std::int64_t v = file.get_int(key);
  DARK_CHECK(v > 0 && v < (1ll << 31), file.path(), ": ", key, " = ", v, " is out of range");
  return static_cast<int>(v);
}

// The keys llama and gemma3 share, under the architecture's prefix.
nn::ModelConfig common_shape(const data::GgufFile& file, const std::string& arch) {
  const std::string a = arch + ".";
  nn::ModelConfig m;
  m.d_model = int_key(file, a + "embedding_length");
  m.n_layers = int_key(file, a + "block_count");
  m.n_heads = int_key(file, a + "attention.head_count");
  m.n_kv_heads = file.has(a + "attention.head_count_kv") ? int_key(file, a + "attention.head_count_kv") : m.n_heads;
  m.d_ff = int_key(file, a + "feed_forward_length");
  m.rope_theta = file.has(a + "rope.freq_base") ? file.get_float(a + "rope.freq_base") : 10000.0;
  m.norm_eps = file.get_float(a + "attention.layer_norm_rms_epsilon");
  m.max_seq_len = file.has(a + "context_length") ? int_key(file, a + "context_length") : 0;
  m.vocab_size = file.has(a + "vocab_size") ? int_key(file, a + "vocab_size")
                                            : static_cast<int>(file.get_string_array("tokenizer.ggml.tokens").size());
  m.tie_embeddings = file.find_tensor("output.weight") == nullptr;
  if (file.has(a + "attention.key_length")) {
    const int key_length = int_key(file, a + "attention.key_length");
    const int value_length = file.has(a + "attention.value_length") ? int_key(file, a + "attention.value_length") : key_length;
    DARK_CHECK(key_length == value_length, file.path(), ": ", a, "attention.key_length ", key_length, " differs from ",
               a, "attention.value_length ", value_length, "; keys and values of different widths are not supported");
    if (key_length * m.n_heads != m.d_model) m.head_dim = key_length;
  }
  DARK_CHECK(m.head_dim > 0 || m.d_model % m.n_heads == 0, file.path(), ": embedding_length ", m.d_model,
             " is not a multiple of head_count ", m.n_heads, " and attention.key_length is missing");
  if (file.has(a + "rope.dimension_count")) {
    const std::int64_t rope_dims = file.get_int(a + "rope.dimension_count");
    DARK_CHECK(rope_dims == m.head_size(), file.path(), ": ", a, "rope.dimension_count ", rope_dims,
               " rotates part of each head (head dim ", m.head_size(), "); partial RoPE is not supported");
  }
  for (const char* scaling : {"rope.scaling.type", "rope.scaling.factor"}) {
    if (!file.has(a + scaling)) continue;
    const bool none = std::string(scaling) == "rope.scaling.type" ? file.get_string(a + scaling) == "none"
                                                                  : file.get_float(a + scaling) == 1.0;
    DARK_CHECK(none, file.path(), ": ", a, scaling, " is set; RoPE scaling is not supported");
  }
  return m;
}

nn::ModelConfig model_shape(const data::GgufFile& file) {
  const std::string arch = file.get_string("general.architecture");
  DARK_CHECK(arch == "llama" || arch == "gemma3", file.path(), ": general.architecture is \"", arch,
             "\"; only \"llama\" and \"gemma3\" models can be imported");
  nn::ModelConfig m = common_shape(file, arch);
  if (arch == "llama") {
    m.mlp = nn::MlpKind::swiglu;
    return m;
  }
  m.family = nn::ModelFamily::gemma3;
  m.mlp = nn::MlpKind::geglu_tanh;
  m.sliding_window = int_key(file, "gemma3.attention.sliding_window");
  const bool pattern_given = file.has("gemma3.attention.sliding_window_pattern");
  m.sliding_window_pattern = pattern_given ? int_key(file, "gemma3.attention.sliding_window_pattern") : 6;
  m.rope_local_theta = 10000.0;
  spdlog::info("{}: gemma3: sliding window {}, every {}th layer global ({}), local RoPE base {} (assumed, as llama.cpp "
               "does: the GGUF does not carry it)",
               file.path(), m.sliding_window, m.sliding_window_pattern, pattern_given ? "from the file" : "assumed",
               m.rope_local_theta);
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

ImportedModel import_gguf(const std::string& path) {
  const data::GgufFile file = data::GgufFile::open(path);
  ImportedModel out;
  out.model = model_shape(file);
  const nn::ModelConfig& m = out.model;
  const bool permuted = m.family == nn::ModelFamily::llama;
  const std::string family(enum_name(m.family));
  for (const data::GgufTensorInfo& info : file.tensors()) {
    const std::string name = our_name(info.name, m.family);
    if (name.empty()) {
      spdlog::warn("{}: tensor '{}' is not part of the {} model; ignored", path, info.name, family);
      continue;
    }
    Tensor t = file.read_f32(info.name);
    if (permuted && name.ends_with("q_proj.weight")) t = unpermute_rotary_rows(t, m.n_heads);
    if (permuted && name.ends_with("k_proj.weight")) t = unpermute_rotary_rows(t, m.n_kv_heads);
    out.parameters.emplace(name, std::move(t));
  }
  spdlog::info("{}: {}, {} layers, d_model {}, {} heads ({} kv) of width {}, d_ff {}, vocab {}, {} tensors", path,
               family, m.n_layers, m.d_model, m.n_heads, m.n_kv_heads, m.head_size(), m.d_ff, m.vocab_size,
               out.parameters.size());
  return out;
}

}  // namespace dark::formats
