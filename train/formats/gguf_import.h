// GGUF import of a pretrained model: general.architecture "llama" (SmolLM2, Llama, ...) or
// "gemma3" (Gemma 3): the shape from the file's metadata and its tensors, dequantised to
// float32 and renamed to our (Hugging Face) parameter names.
//
// GGUF stores the q and k projection rows permuted: llama.cpp rotates adjacent pairs of
// dimensions (0,1), (2,3), ... while Hugging Face Llama, and this model, rotate dimension i
// with i + head_dim/2. The converter reorders each head's rows from [half, i] to [i, half]
// so the GGUF layout works with adjacent pairs; the import undoes it. Gemma 3 is stored
// unpermuted (llama.cpp runs it with NeoX-style RoPE, which is the rotate-half convention).
//
// Gemma 3 specifics: llama.cpp's converter stores Gemma's RMSNorm weights w as the
// multipliers 1 + w, which is our convention, so they load as they are. Two values the
// GGUF does not carry are assumed as llama.cpp assumes them for gemma3: every 6th layer is
// global (sliding_window_pattern 6; gemma3.attention.sliding_window_pattern is read when
// present) and the local layers' RoPE base is 10000; the import logs both.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"
#include "nn/model.h"

namespace dark::formats {

struct ImportedModel {
  nn::ModelConfig model;  // architecture keys from the metadata (max_seq_len from <arch>.context_length)
  std::map<std::string, Tensor> parameters;  // our names, float32, CPU
};

// Reads a GGUF file whose general.architecture is "llama" or "gemma3". Throws dark::Error
// naming the file and the missing or unsupported key or tensor.
ImportedModel import_gguf(const std::string& path);

// The inverse of GGUF's rotary row permutation of a (n_heads * head_dim, in) projection:
// row h*head_dim + 2i + j of the GGUF tensor becomes row h*head_dim + j*head_dim/2 + i.
Tensor unpermute_rotary_rows(const Tensor& weight, std::int64_t n_heads);

}  // namespace dark::formats
