// Finetuning: start a run from trained weights (one of our checkpoints, a GGUF model or a
// Hugging Face Llama folder), possibly with a different attention kind, and train only some
// of the parameters.
//
// Attention swap: the weights shared by every kind (embeddings, norms, q/k/v/o projections,
// MLP) load by name; the parameters the new kind adds (DARKFormer's M, LFK's W) keep their
// initialisation from the config (M = identity or whiten on calibration batches of the
// pretrained model, W = a Performer draw), as method.md says. Feature-map parameters of the
// source that the new kind lacks are dropped with a log line.
//
// Freezing: finetune.trainable is a list of parameter-name globs and presets; parameters
// matching none are frozen: they do not require grad (the tape records nothing for them),
// get no gradient buffer and no optimizer state.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/model.h"
#include "train/config.h"

namespace dark::train {

// The model shape and weights a run starts from.
struct InitSource {
  std::string path;
  std::string description;  // "checkpoint runs/x/checkpoints/step_00001500" or "GGUF model.gguf"
  nn::ModelConfig model;         // the architecture keys (vocab_size, d_model, ..., tie_embeddings)
  std::map<std::string, Tensor> parameters;  // by our parameter names, float32 on the CPU
  std::string data_dir;      // our checkpoints: the data folder it was trained on ("" for GGUF)
  // The tokenizer the source was trained with, which the run's data must use: a Hugging Face
  // folder's, or the one our checkpoints record ("" for GGUF and older checkpoints).
  std::string tokenizer_hash;
};

// Reads a .gguf model (llama architecture), a Hugging Face Llama folder (hf_import.h) or a
// checkpoint / run folder of ours.
InitSource load_init_source(const std::string& path);

// The model keys the config document did not set (config.given) take the source's values;
// the ones it did set must agree with them. The architecture is adopted, and the context:
// model.max_seq_len, when the document does not set it, becomes max(the source's,
// data.seq_len). dropout and init_std stay the run's own.
void adopt_architecture(RunConfig& config, const nn::ModelConfig& source, const std::string& source_name);

// Copies the source's weights into `model` by name (see the file comment for what may be
// missing on either side); shapes must match. Returns the number of tensors loaded.
std::size_t load_source_weights(nn::CausalLM& model, const InitSource& source);

// The globs a list of finetune.trainable entries stands for: presets expanded, globs kept.
//   all                -> "*"
//   limited_attention  -> q_proj, k_proj, v_proj of every layer and the attention feature maps
std::vector<std::string> trainable_globs(const std::vector<std::string>& entries);

struct Freezing {
  std::vector<std::pair<std::string, Tensor*>> trainable;  // for the ParameterBuffer
  std::vector<std::string> frozen;                         // names
  std::int64_t trainable_numel = 0, frozen_numel = 0;
};

// Marks the parameters matching no trainable glob as frozen (requires_grad off) and returns
// the trainable ones. Throws when an entry matches no parameter (a typo would otherwise
// silently freeze everything it meant) or when nothing is trainable.
Freezing freeze_parameters(nn::CausalLM& model, const std::vector<std::string>& entries);

// Bytes of gradient and optimizer state that frozen parameters do not need: 4 (fp32
// gradient) plus 8 (AdamW's two moments) or 4 (SGD momentum) per parameter.
std::int64_t frozen_bytes_saved(const Freezing& f, const RunConfig& config);

}  // namespace dark::train
