// ByteTokenizer and the tokenizer factory (a GGUF file's tokenizer.ggml.model picks the
// GGUF tokenizer class).
#include "data/tokenizer.h"

#include <cstdio>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/gguf.h"
#include "data/hf_tokenizer_json.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/spm_tokenizer.h"

namespace dark::data {

std::vector<std::int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (const std::int32_t id : ids) {
    DARK_CHECK(id >= 0 && id < kVocabSize, "byte tokenizer: decode: id ", id, " outside the vocabulary [0, ",
               kVocabSize, ")");
    if (id < 256) out.push_back(static_cast<char>(id));
  }
  return out;
}

std::string ByteTokenizer::piece(std::int32_t id) const {
  DARK_CHECK(id >= 0 && id < kVocabSize, "byte tokenizer: id ", id, " outside the vocabulary [0, ", kVocabSize, ")");
  if (id == kEos) return "<eos>";
  if (id == kBos) return "<bos>";
  if (id > 0x20 && id < 0x7f) return std::string(1, static_cast<char>(id));
  char text[8];
  std::snprintf(text, sizeof text, "<0x%02X>", id);
  return text;
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  const std::string model = GgufFile::open(path).get_string("tokenizer.ggml.model");
  if (model == "gpt2") return BpeTokenizer::from_gguf(path);
  if (model == "llama") return SpmTokenizer::from_gguf(path);
  throw Error(str(path, ": tokenizer.ggml.model is '", model,
                  "'; supported: \"gpt2\" (byte-level BPE), \"llama\" (SentencePiece)"));
}

std::unique_ptr<Tokenizer> load_tokenizer(TokenizerKind kind, const std::string& model_path) {
  switch (kind) {
    case TokenizerKind::byte: return std::make_unique<ByteTokenizer>();
    case TokenizerKind::sentencepiece: return SentencePieceTokenizer::load(model_path);
    case TokenizerKind::gguf: return load_gguf_tokenizer(model_path);
    case TokenizerKind::hf: return load_hf_tokenizer(model_path);
  }
  throw Error("tokenizer: unknown kind");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& model_path) {
  return load_tokenizer(parse_enum<TokenizerKind>(kind, "tokenizer: kind"), model_path);
}

std::vector<std::int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text, bool bos) {
  DARK_CHECK(!bos || tokenizer.bos_id() >= 0, "prompt: bos asked for, but tokenizer ", tokenizer.hash(), " has none");
  std::vector<std::int32_t> ids;
  if (bos) ids.push_back(tokenizer.bos_id());
  const std::vector<std::int32_t> text_ids = tokenizer.encode(text);
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  if (ids.empty()) ids.push_back(tokenizer.eos_id());
  return ids;
}

}  // namespace dark::data
