// SentencePiece BPE tokenizer: trained in-process on sampled lines of the train split, or
// loaded from an existing .model file. The model bytes are kept so they can be saved next
// to the shards (tokenizer.model) and hashed into the shard headers.
//
// Training options (fixed here so every run builds the same tokenizer): BPE, byte_fallback
// (any byte string encodes; invalid UTF-8 in the input is turned into U+FFFD by
// SentencePiece's normalizer), identity normalization with whitespace kept as is (decode
// gives back the exact text, newlines and indentation included: "\n" becomes the byte
// piece <0x0A>, runs of spaces become whitespace-only pieces), no dummy prefix, digits split,
// ids <unk>=0, <s>=1, </s>=2 (the end-of-document token), no padding piece.
// So decode(encode(s)) == s for valid UTF-8 s. That includes U+2581 "▁", SentencePiece's own
// whitespace symbol, which every piece decodes as a space: encode() writes a "▁" of the text
// as its three byte pieces (models without byte pieces leave it to SentencePiece: " ").
// Training is deterministic: the same lines and options give the same model bytes. The
// trainer runs with a fixed num_threads = 2 because SentencePiece stores num_threads in the
// model bytes (the pieces do not depend on it), and the bytes define the tokenizer hash.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tokenizer.h"  // BpeTokenType: SentencePiece's piece types have the same numbers
#include "data/tokenizer.h"

namespace dark::data {

struct SentencePieceOptions {
  std::int32_t vocab_size = 8192;
  double character_coverage = 0.9995;  // rarer characters fall back to bytes
  std::uint64_t seed = 0;  // seeds SentencePiece's global RNG (BPE with these options draws none)
};

// Lines of text for tokenizer training: splits documents at '\n', skips empty lines and
// lines over kMaxLineBytes, and keeps a uniform reservoir sample of at most max_lines lines
// (Algorithm R with Philox keyed by (seed, kStreamTokenizerSample, line index)), so the
// sample depends only on the input order and the seed.
class LineSampler {
 public:
  static constexpr std::size_t kMaxLineBytes = 16384;
  LineSampler(std::int64_t max_lines, std::uint64_t seed);
  void add_text(std::string_view text);
  const std::vector<std::string>& lines() const { return lines_; }
  std::int64_t lines_seen() const { return seen_; }

 private:
  std::int64_t max_lines_;
  std::uint64_t seed_;
  std::int64_t seen_ = 0;
  std::vector<std::string> lines_;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  ~SentencePieceTokenizer() override;
  // Loads a .model file; throws naming the path when it is missing or not a SentencePiece
  // model, or when the model has no end-of-sequence piece.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& path);
  // `origin` names the bytes in error messages.
  static std::unique_ptr<SentencePieceTokenizer> from_model_bytes(std::string bytes, const std::string& origin);
  // Trains BPE on `lines` (each one sentence, without '\n'). Throws with SentencePiece's
  // message (e.g. a vocabulary too large for the text) on failure.
  static std::unique_ptr<SentencePieceTokenizer> train(const std::vector<std::string>& lines,
                                                       const SentencePieceOptions& options);

  // Writes the model bytes atomically.
  void save(const std::string& path) const;
  const std::string& model_bytes() const;

  std::string kind() const override { return "sentencepiece"; }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override;
  std::int32_t eos_id() const override;
  std::int32_t bos_id() const override;
  std::string hash() const override { return hash_; }
  std::string piece(std::int32_t id) const override;

  // What export-hf's tokenizer.json needs (data/spm_tokenizer_json.h): a piece's score
  // (higher merges first), its type as the model stores it (normal, unknown, control,
  // user-defined, unused, byte), and the unknown piece's id (-1: none). Throw out of range.
  float score(std::int32_t id) const;
  BpeTokenType token_type(std::int32_t id) const;
  std::int32_t unk_id() const;

 private:
  struct Impl;
  SentencePieceTokenizer();
  std::unique_ptr<Impl> impl_;
  std::string hash_;
};

}  // namespace dark::data
