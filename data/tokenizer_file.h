// A tokenizer as one self-contained file, so that a checkpoint can carry the tokenizer its
// ids mean and be used on a machine without the data it was trained on.
//   sentencepiece  "tokenizer.model": the SentencePiece model bytes themselves
//   gguf, hf (BPE) "tokenizer.bpe.json": {"format": "darkformer-bpe-tokenizer",
//                  "format_version": 1, "pre", "tokens", "token_types", "merges", "bos_id",
//                  "eos_id", "unk_id", "pad_id", "add_bos"} (data/bpe_tokenizer.h BpeVocab)
//   gguf (SPM)     "tokenizer.spm.json": {"format": "darkformer-spm-tokenizer",
//                  "format_version": 1, "tokens", "scores", "token_types", "bos_id", "eos_id",
//                  "unk_id", "pad_id", "add_bos", "add_eos", "add_space_prefix"}
//                  (data/spm_tokenizer.h SpmVocab)
//   byte           nothing: the byte tokenizer has no data
// Both GGUF tokenizers have kind "gguf"; tokenizer_from_file tells them apart by "format".
// Rebuilding from the file gives a tokenizer with the same hash() (the hash is a function of
// the model bytes or of the vocabulary), which callers check against the hash they recorded.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "data/tokenizer.h"

namespace dark::data {

struct TokenizerFile {
  std::string name;   // a plain file name: "tokenizer.model", "tokenizer.bpe.json" or "tokenizer.spm.json"
  std::string bytes;
};

// The file that rebuilds `tokenizer`; nullopt for the byte tokenizer.
std::optional<TokenizerFile> tokenizer_file(const Tokenizer& tokenizer);

// Rebuilds a tokenizer of `kind` (Tokenizer::kind()) from the file tokenizer_file() wrote
// (ignored for "byte"). `origin` names the file in errors, which also name a malformed field.
std::unique_ptr<Tokenizer> tokenizer_from_file(const std::string& kind, std::string bytes, const std::string& origin);

}  // namespace dark::data
