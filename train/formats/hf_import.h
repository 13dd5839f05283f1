// Import of a Hugging Face Llama folder (LlamaForCausalLM as save_pretrained writes it, or an
// export-hf folder): the inverse of export-hf.
//   config.json   model_type "llama" (or architectures ["LlamaForCausalLM"]); the shape keys
//                 hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//                 num_key_value_heads, vocab_size, rms_norm_eps, rope_theta (transformers 4)
//                 or rope_parameters {"rope_type": "default", "rope_theta"} (transformers 5),
//                 tie_word_embeddings, hidden_act "silu" (swiglu), "gelu" (geglu) or
//                 "gelu_pytorch_tanh" (geglu_tanh),
//                 max_position_embeddings. What our model does not implement is an error
//                 naming the key: rope scaling, attention_bias, mlp_bias, a head_dim other than
//                 hidden_size / num_attention_heads, partial rotary embeddings, other models.
//   weights       model.safetensors, or model.safetensors.index.json and the shards its
//                 weight_map names (each tensor must be in the shard it names); F32 as is,
//                 BF16, F16 and F64 converted to float32. The names are ours already; tied
//                 models' lm_head.weight (if saved) is dropped, rotary inv_freq buffers are
//                 ignored; shapes and names are then checked by load_source_weights.
//   rotary layout transformers' rotate_half pairs dimension i with i + head_dim/2, as our
//                 RoPE does: q_proj and k_proj load unpermuted (GGUF's permutation is
//                 llama.cpp's; see gguf_import.h).
//   tokenizer     tokenizer.model (SentencePiece) when present, else tokenizer.json
//                 (byte-level BPE, data.tokenizer "hf"; data/hf_tokenizer_json.h).
#pragma once
#include <string>

#include "train/formats/gguf_import.h"
#include "train/formats/hf_folder.h"  // is_hf_model_folder, hf_tokenizer_file

namespace dark::formats {

// Reads the folder's config.json and weights. Throws dark::Error naming the folder, file and
// key or tensor at fault.
ImportedModel import_hf_llama(const std::string& dir);

}  // namespace dark::formats
