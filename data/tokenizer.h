// Tokenizer interface shared by the corpus builder, shards and generation, plus the
// byte-level tokenizer used by tests.
//
// Invariants: ids are in [0, vocab_size()); eos_id() is the end-of-document token that
// separates documents in a shard; hash() identifies the exact tokenizer (kind + model
// bytes) in at most 63 characters and is stored in every shard header, so a shard is never
// read with a different tokenizer. encode/decode are const and safe to call from several
// threads at once.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/enum_names.h"

namespace dark::data {

// The tokenizer families (data.tokenizer in a run config; "tokenizer" in meta.json).
enum class TokenizerKind { sentencepiece, byte, gguf, hf };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte", "sentencepiece", "gguf" (from GGUF metadata: byte-level BPE or SentencePiece-style,
  // as tokenizer.ggml.model says) or "hf" (byte-level BPE from a Hugging Face tokenizer.json).
  virtual std::string kind() const = 0;
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // eos and bos decode to nothing. Throws on an id outside the vocabulary.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  virtual std::int32_t vocab_size() const = 0;
  virtual std::int32_t eos_id() const = 0;
  // -1 when the tokenizer has no beginning-of-sequence token.
  virtual std::int32_t bos_id() const = 0;
  // True when the tokenizer's own metadata says its model was trained with bos at every
  // sequence start (GGUF tokenizer.ggml.add_bos_token, Hugging Face add_bos_token). encode
  // never adds it; the data pipeline does (data.bos, prepare.h).
  virtual bool add_bos() const { return false; }
  // Stable identifier, e.g. "byte-v1" or "sentencepiece-<FNV-1a64 of the model bytes>".
  virtual std::string hash() const = 0;
  // Readable form of one token (for logs): "<0x0A>", "▁the", "<eos>".
  virtual std::string piece(std::int32_t id) const = 0;
};

// Bytes 0..255 are ids 0..255; 256 is <eos>, 257 is <bos> (vocab_size 258). encode never
// fails (any byte string, valid UTF-8 or not, round-trips through decode).
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr std::int32_t kEos = 256;
  static constexpr std::int32_t kBos = 257;
  static constexpr std::int32_t kVocabSize = 258;

  std::string kind() const override { return "byte"; }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override { return kVocabSize; }
  std::int32_t eos_id() const override { return kEos; }
  std::int32_t bos_id() const override { return kBos; }
  std::string hash() const override { return "byte-v1"; }
  std::string piece(std::int32_t id) const override;
};

// The ids a model continues from: bos first when `bos` (the run's rule, prepare.h BosRule),
// then encode(text); a lone eos for an empty text without bos, so there is always a token.
std::vector<std::int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text, bool bos);

// Loads a tokenizer by kind: byte (model_path ignored), sentencepiece (a .model file) or
// gguf (the tokenizer in a .gguf file's metadata, load_gguf_tokenizer) or hf (a Hugging Face
// tokenizer.json and the special tokens of the files beside it, hf_tokenizer_json.h).
std::unique_ptr<Tokenizer> load_tokenizer(TokenizerKind kind, const std::string& model_path);
// The tokenizer of a .gguf file by its tokenizer.ggml.model: "gpt2" the byte-level BPE
// (bpe_tokenizer.h), "llama" the SentencePiece-style one (spm_tokenizer.h); any other value is
// an error naming the file, the key and the supported values.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path);
// The same with the kind as spelled in files ("byte", ...); an unknown spelling is an error.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& model_path);

}  // namespace dark::data

namespace dark {
template <>
struct EnumNames<data::TokenizerKind> {
  static constexpr std::array<std::pair<data::TokenizerKind, std::string_view>, 4> table{
      {{data::TokenizerKind::sentencepiece, "sentencepiece"},
       {data::TokenizerKind::byte, "byte"},
       {data::TokenizerKind::gguf, "gguf"},
       {data::TokenizerKind::hf, "hf"}}};
};
}  // namespace dark
