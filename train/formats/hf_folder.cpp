// Hugging Face folder recognition (see hf_folder.h).
#include "train/formats/hf_folder.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace dark::formats {
namespace fs = std::filesystem;
using nlohmann::json;

bool is_hf_model_folder(const std::string& path) {
  std::error_code ec;
  const fs::path config = fs::path(path) / "config.json";
  if (path.empty() || !fs::is_directory(path, ec) || !fs::is_regular_file(config, ec)) return false;
  try {
    const json doc = json::parse(read_file(config));
    return doc.is_object() && (doc.contains("model_type") || doc.contains("architectures"));
  } catch (const json::exception&) {
    return false;
  }
}

HfTokenizerFile hf_tokenizer_file(const std::string& dir) {
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer.model")) return {data::TokenizerKind::sentencepiece, (d / "tokenizer.model").string()};
  if (fs::exists(d / "tokenizer.json")) return {data::TokenizerKind::hf, (d / "tokenizer.json").string()};
  throw Error(str("Hugging Face import: ", dir, " has no tokenizer.model or tokenizer.json; set data.tokenizer and "
                  "data.tokenizer_model to the tokenizer this model was trained with"));
}

}  // namespace dark::formats
