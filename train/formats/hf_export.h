// Export of a trained model as a Hugging Face folder that transformers loads with
// AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained:
// - softmax attention everywhere: LlamaForCausalLM (a gemma3-family model: Gemma3ForCausalLM,
//   its norm weights written as w = multiplier - 1, Gemma's form);
// - any layer with Performer, LFK or DARKFormer attention (with or without an exact window,
//   in mode exact, mixed per layer): our own architecture, DarkformerForCausalLM, whose
//   PyTorch code (train/formats/hf_modeling/, embedded in the program) is written beside the
//   weights as modeling_darkformer.py and configuration_darkformer.py and loaded with
//   trust_remote_code=True; config.json names it in "auto_map" and gives each layer's attention
//   in "attention_layers"; model.safetensors also holds each random-feature layer's features
//   in force (feature_map.omega, drawn for the checkpoint's redraw epoch, and a proposal's
//   feature_map.log_weight), so the outputs are deterministic and equal ours; norm weights are
//   the multipliers themselves; generation_config.json says use_cache false (the modeling file
//   keeps no cache).
// The files:
//   config.json             LlamaConfig or Gemma3TextConfig (architecture keys, bos/eos ids)
//   model.safetensors       our parameters under their own names, float32: our names are
//                           Hugging Face Llama's, and our RoPE rotates dimension i with
//                           i + head_dim/2 (rotate_half) as transformers does, so q_proj and
//                           k_proj need no permutation (unlike GGUF, see gguf_import.h)
//   generation_config.json  bos/eos/pad ids (pad = eos without a pad token), greedy decoding
//                           (do_sample false)
//   the tokenizer, by kind, each a tokenizer.json that transformers loads with the tokenizers
//   library alone (no sentencepiece, no protobuf), under a PreTrainedTokenizerFast
//   tokenizer_config.json (a model-specific class would rebuild its own pipeline):
//     sentencepiece  tokenizer.json (SentencePiece-style BPE, data/spm_tokenizer_json.h:
//                    merges from the scores, byte fallback, no "▁" prefix unless the model
//                    adds one) + tokenizer.model (our model bytes, for sentencepiece users);
//                    split_special_tokens true, because SentencePiece encodes the text "</s>"
//                    as ordinary pieces where transformers would otherwise emit the eos id
//     gguf (spm)     tokenizer.json the same way from a GGUF's SpmTokenizer (Gemma 3's),
//                    split_special_tokens true (control-token text is ordinary text to it)
//     gguf / hf      tokenizer.json (byte-level BPE, data/hf_tokenizer_json.h); our encode
//     (byte-level)   matches control and user-defined tokens in the text, as transformers does
//     byte           tokenizer.json of the 256 byte pieces (ids 0..255 = bytes, no merges),
//                    <eos> 256 and <bos> 257, split_special_tokens true: the same ids for any
//                    text (data::byte_tokenizer_vocab)
//   special_tokens_map.json  the special tokens again, for older transformers versions
// add_bos (the run fed bos at every sequence start): tokenizer_config.json says
// "add_bos_token": true and tokenizer.json has a post_processor putting bos first, so
// AutoTokenizer's ids start with bos as the model saw in training (as Hub Llama and Gemma
// folders do); without it neither adds bos (nor eos, ever).
// clean_up_tokenization_spaces is false everywhere: decode gives back the exact text.
// tests/reference/check_hf_tokenizer.py checks ids, decode and greedy generation with
// transformers (tests/hf_tokenizer_check.sh; Gemma 3: tests/hf_gemma3_check.sh).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "nn/model.h"

namespace dark::formats {

// Writes the folder `out` (created if needed; files replaced atomically) for `model` (its
// config gives the architecture keys); `tokenizer` may be null (no tokenizer files, a
// warning). add_bos: see above. Throws when add_bos is set and the tokenizer has no bos.
// Returns the files written.
std::vector<std::filesystem::path> export_hf(nn::CausalLM& model, const data::Tokenizer* tokenizer,
                                             const std::filesystem::path& out, bool add_bos);

}  // namespace dark::formats
