// The tests' Hugging Face folder (tests/reference/hf_llama_tiny: a 2-layer Llama, byte-level
// BPE with SmolLM2's digit rule) written as a GGUF file the way llama.cpp's
// convert_hf_to_gguf.py writes a Llama: float32 tensors under GGUF names, q and k rows
// permuted for llama.cpp's adjacent-pair rotation, the tokenizer as tokenizer.ggml.* metadata
// (model "gpt2", pre "smollm"). The same weights and tokenizer in two formats, so that a
// GGUF path and a folder path must give the same numbers. Written by tests/gguf_test_writer.h
// (the published layout, independent of data/gguf.cpp).
#pragma once
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "tests/gguf_test_writer.h"
#include "train/formats/hf_import.h"

namespace dark::testing {

inline const std::filesystem::path kHfTinyFolder = std::filesystem::path(DARK_TEST_DATA_DIR) / "hf_llama_tiny";

// convert_hf_to_gguf's LlamaModel.permute: each head's rows reshaped (2, head_dim / 2) and
// swapped, so llama.cpp's adjacent pairs (0, 1), (2, 3), ... hold Hugging Face's (i, i + D/2).
inline std::vector<float> llama_cpp_rotary_rows(const std::vector<float>& w, std::int64_t heads, std::int64_t rows,
                                                std::int64_t cols) {
  const std::int64_t head_dim = rows / heads;
  std::vector<float> out(w.size());
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t j = 0; j < 2; ++j)
      for (std::int64_t i = 0; i < head_dim / 2; ++i)
        for (std::int64_t c = 0; c < cols; ++c)
          out[((h * (head_dim / 2) + i) * 2 + j) * cols + c] = w[((h * 2 + j) * (head_dim / 2) + i) * cols + c];
  return out;
}

// Writes the GGUF of hf_llama_tiny to `path`; `context_length` is llama.context_length (the
// folder says max_position_embeddings 64).
inline void write_hf_tiny_as_gguf(const std::filesystem::path& path, std::uint32_t context_length = 64) {
  const formats::ImportedModel hf = formats::import_hf_llama(kHfTinyFolder.string());
  const nn::ModelConfig& m = hf.model;
  GgufTestWriter w;
  w.kv_string("general.architecture", "llama");
  w.kv<std::uint32_t>("llama.context_length", kGgufU32, context_length);
  w.kv<std::uint32_t>("llama.embedding_length", kGgufU32, static_cast<std::uint32_t>(m.d_model));
  w.kv<std::uint32_t>("llama.block_count", kGgufU32, static_cast<std::uint32_t>(m.n_layers));
  w.kv<std::uint32_t>("llama.feed_forward_length", kGgufU32, static_cast<std::uint32_t>(m.d_ff));
  w.kv<std::uint32_t>("llama.attention.head_count", kGgufU32, static_cast<std::uint32_t>(m.n_heads));
  w.kv<std::uint32_t>("llama.attention.head_count_kv", kGgufU32, static_cast<std::uint32_t>(m.n_kv_heads));
  w.kv<float>("llama.rope.freq_base", kGgufF32, static_cast<float>(m.rope_theta));
  w.kv<float>("llama.attention.layer_norm_rms_epsilon", kGgufF32, static_cast<float>(m.norm_eps));
  w.kv<std::uint32_t>("llama.vocab_size", kGgufU32, static_cast<std::uint32_t>(m.vocab_size));

  // The tokenizer: tokenizer.json's vocabulary by id, its merges "a b", special tokens as control.
  const nlohmann::json tok = nlohmann::json::parse(read_file(kHfTinyFolder / "tokenizer.json"));
  std::vector<std::string> tokens(tok["model"]["vocab"].size());
  for (const auto& [piece, id] : tok["model"]["vocab"].items()) tokens.at(id.get<std::size_t>()) = piece;
  std::vector<std::int32_t> types(tokens.size(), 1);
  for (const auto& added : tok["added_tokens"]) types.at(added["id"].get<std::size_t>()) = 3;
  std::vector<std::string> merges;
  for (const auto& pair : tok["model"]["merges"]) merges.push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
  w.kv_string("tokenizer.ggml.model", "gpt2");
  w.kv_string("tokenizer.ggml.pre", "smollm");
  w.kv_raw("tokenizer.ggml.tokens", kGgufArray, GgufTestWriter::string_array_payload(tokens));
  w.kv_raw("tokenizer.ggml.token_type", kGgufArray, GgufTestWriter::array_payload<std::int32_t>(kGgufI32, types));
  w.kv_raw("tokenizer.ggml.merges", kGgufArray, GgufTestWriter::string_array_payload(merges));
  w.kv<std::uint32_t>("tokenizer.ggml.bos_token_id", kGgufU32, 1);  // config.json's bos and eos
  w.kv<std::uint32_t>("tokenizer.ggml.eos_token_id", kGgufU32, 0);

  const auto put = [&](const std::string& gguf_name, const std::string& ours, std::int64_t permute_heads = 0) {
    const Tensor& t = hf.parameters.at(ours);
    std::vector<float> values = t.to(DType::f32).contiguous().to_vector<float>();
    const std::int64_t rows = t.size(0), cols = t.dim() == 2 ? t.size(1) : 1;
    if (permute_heads > 0) values = llama_cpp_rotary_rows(values, permute_heads, rows, cols);
    std::string bytes(values.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    // GGUF lists dimensions innermost first: a (rows, cols) matrix is [cols, rows].
    const std::vector<std::uint64_t> dims = t.dim() == 2 ? std::vector<std::uint64_t>{static_cast<std::uint64_t>(cols),
                                                                                      static_cast<std::uint64_t>(rows)}
                                                         : std::vector<std::uint64_t>{static_cast<std::uint64_t>(rows)};
    w.tensor(gguf_name, dims, /*GGML_TYPE_F32=*/0, bytes);
  };
  put("token_embd.weight", "model.embed_tokens.weight");
  put("output_norm.weight", "model.norm.weight");
  put("output.weight", "lm_head.weight");
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".", ours = "model.layers." + std::to_string(l) + ".";
    put(blk + "attn_norm.weight", ours + "input_layernorm.weight");
    put(blk + "attn_q.weight", ours + "self_attn.q_proj.weight", m.n_heads);
    put(blk + "attn_k.weight", ours + "self_attn.k_proj.weight", m.n_kv_heads);
    put(blk + "attn_v.weight", ours + "self_attn.v_proj.weight");
    put(blk + "attn_output.weight", ours + "self_attn.o_proj.weight");
    put(blk + "ffn_norm.weight", ours + "post_attention_layernorm.weight");
    put(blk + "ffn_gate.weight", ours + "mlp.gate_proj.weight");
    put(blk + "ffn_up.weight", ours + "mlp.up_proj.weight");
    put(blk + "ffn_down.weight", ours + "mlp.down_proj.weight");
  }
  write_bytes(path.string(), w.build().bytes);
}

}  // namespace dark::testing
