// Recognising a Hugging Face model folder and the tokenizer it brings, without reading its
// weights: what the config resolver needs (train/config.cpp) to let finetune.init_from name a
// folder. The import itself is train/formats/hf_import.h.
#pragma once
#include <string>

#include "data/tokenizer.h"

namespace dark::formats {

// Whether `path` is a Hugging Face model folder: a directory whose config.json has a
// "model_type" or "architectures" key (our run folders' config.json has neither).
bool is_hf_model_folder(const std::string& path);

// The tokenizer a Hugging Face folder brings: the kind and file data.tokenizer and
// data.tokenizer_model take. Throws when the folder has neither tokenizer file.
struct HfTokenizerFile {
  data::TokenizerKind kind = data::TokenizerKind::hf;
  std::string path;
};
HfTokenizerFile hf_tokenizer_file(const std::string& dir);

}  // namespace dark::formats
