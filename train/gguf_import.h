// GGUF import of a pretrained llama-architecture model (SmolLM2, Llama, ...): the shape from
// the file's metadata and its tensors, dequantised to float32 and renamed to our (Hugging
// Face Llama) parameter names.
//
// GGUF stores the q and k projection rows permuted: llama.cpp rotates adjacent pairs of
// dimensions (0,1), (2,3), ... while Hugging Face Llama, and this model, rotate dimension i
// with i + head_dim/2. The converter reorders each head's rows from [half, i] to [i, half]
// so the GGUF layout works with adjacent pairs; the import undoes it.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"
#include "train/config.h"

namespace dark::train {

struct ImportedModel {
  nn::ModelConfig model;  // architecture keys from the metadata (max_seq_len from llama.context_length)
  std::map<std::string, Tensor> parameters;  // our names, float32, CPU
};

// Reads a GGUF file whose general.architecture is "llama". Throws dark::Error naming the
// file and the missing or unsupported key or tensor.
ImportedModel import_gguf_llama(const std::string& path);

// The inverse of GGUF's rotary row permutation of a (n_heads * head_dim, in) projection:
// row h*head_dim + 2i + j of the GGUF tensor becomes row h*head_dim + j*head_dim/2 + i.
Tensor unpermute_rotary_rows(const Tensor& weight, std::int64_t n_heads);

}  // namespace dark::train
