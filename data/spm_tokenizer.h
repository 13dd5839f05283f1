// SentencePiece-style tokenizer as llama.cpp runs it (its "SPM" vocabulary type), built from
// plain data or from the tokenizer metadata of a GGUF file (tokenizer.ggml.model "llama"),
// e.g. Gemma 3 270M. Written from the algorithm; checked against llama.cpp's ids by
// tests/test_gguf_spm_tokenizer.cpp (reference: tests/reference/make_gemma3_tokenizer_reference.py).
//
// encode(text), as llama_tokenize(text, add_special=false, parse_special=false):
//   1. User-defined tokens (type 4) are split out of the text as their ids: the tokens are
//      taken longest first (ties: lower id first), each one cutting every non-overlapping
//      occurrence (left to right) out of the text fragments that earlier tokens left. This
//      is not leftmost-longest matching: with "bcd" and "ab", "abcd" gives "a", [bcd].
//      Control and unknown token text ("<eos>", "<start_of_turn>") is ordinary text.
//   2. Each remaining fragment: a space in front when add_space_prefix and the fragment is
//      first or follows a split-out token; every ' ' becomes U+2581 "▁".
//   3. The fragment is cut into characters by the UTF-8 lead byte alone (0xC0-0xDF: 2 bytes,
//      0xE0-0xEF: 3, 0xF0-0xFF: 4, anything else 1; cut short at the end), so invalid UTF-8
//      never fails. Then, repeatedly, the adjacent pair whose concatenation is a vocabulary
//      piece (any type) with the highest score is merged (ties: the leftmost pair), until no
//      pair is a piece. A priority queue of candidate pairs makes it O(n log n) in the
//      fragment's length; fragments may be any length (a 1 MB document without a newline).
//   4. Each final symbol is its piece's id, or, when it is not a piece, one id per byte: the
//      byte token "<0xXX>", else a piece that is the single byte, else unk (else dropped).
// tokenize(text, add_special) is encode() with bos in front when add_special and add_bos,
// and eos behind when add_special and add_eos: llama_tokenize(text, add_special, false).
// encode() itself never adds bos/eos (the Tokenizer convention; add_bos is recorded).
// decode, as llama_detokenize(ids, remove_special=false, unparse_special=false): normal
// pieces with "▁" turned into spaces, byte tokens as their byte, user-defined tokens as
// their text; control, unknown and unused tokens (bos and eos among them) give nothing. With
// add_space_prefix, one leading space of the first id's text is dropped.
// So decode(encode(s)) == s for valid UTF-8 s without "▁" when every byte has a byte token
// and add_space_prefix is false (Gemma 3: any such s). Invalid UTF-8 need not round-trip: a
// lead byte claims the bytes after it, so a space there stays "▁".
// All methods are const and thread-safe (encode's caches live in the call; nothing shared
// is mutable).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tokenizer.h"  // BpeTokenType: the GGUF token types
#include "data/tokenizer.h"

namespace dark::data {

// Plain data an SpmTokenizer is built from: pieces as stored ("▁the", "<0x0A>", "<eos>").
struct SpmVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;              // one per token, finite; higher merges first
  std::vector<std::int32_t> token_types;  // empty: all normal; else one per token (BpeTokenType, 1..6)
  std::int32_t bos_id = -1;               // -1: none (required when add_bos)
  std::int32_t eos_id = -1;               // required
  std::int32_t unk_id = -1;               // -1: none (bytes without a byte token are then dropped)
  std::int32_t pad_id = -1;               // -1: none
  bool add_bos = true;                    // tokenize(add_special=true) puts bos first
  bool add_eos = false;                   // tokenize(add_special=true) puts eos last
  bool add_space_prefix = false;          // encode puts a space before each fragment (step 2)
};

class SpmTokenizer final : public Tokenizer {
 public:
  // Validates the data: at least one token, as many scores (finite) and types (1..6) as
  // tokens, no two tokens with the same text, byte tokens (type 6) spelled "<0xXX>", special
  // ids in range (eos required, bos when add_bos). Throws dark::Error naming the item.
  explicit SpmTokenizer(SpmVocab vocab);
  ~SpmTokenizer() override;

  // Reads tokenizer.ggml.* from a GGUF file with tokenizer.ggml.model "llama": tokens,
  // scores (required) and token_type, the special ids (eos required), add_bos_token
  // (default true), add_eos_token (default false), add_space_prefix (default true), as
  // llama.cpp does. Like llama.cpp, it re-types as control the tokens whose text is one of
  // llama.cpp's end-of-generation names ("</s>", "<end_of_turn>", "<|im_end|>", ...), so
  // Gemma's user-defined "</s>" is ordinary text. Errors name the path and the key.
  // Defined in spm_tokenizer_gguf.cpp.
  static std::unique_ptr<SpmTokenizer> from_gguf(const std::string& path);

  // "gguf": load_tokenizer("gguf", path) loads it again.
  std::string kind() const override { return "gguf"; }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::vector<std::int32_t> tokenize(std::string_view text, bool add_special) const;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override;
  std::int32_t eos_id() const override;
  std::int32_t bos_id() const override;
  // "gguf-spm-<FNV-1a64 of tokens, types, score bits, special ids and the three flags>".
  std::string hash() const override { return hash_; }
  // The token text as stored ("▁the", "<0x0A>", "<start_of_turn>"). Throws out of range.
  std::string piece(std::int32_t id) const override;

  std::int32_t unk_id() const;
  std::int32_t pad_id() const;
  bool add_bos() const override;
  bool add_eos() const;
  bool add_space_prefix() const;
  BpeTokenType token_type(std::int32_t id) const;
  float score(std::int32_t id) const;
  // Id of a piece as stored, -1 when absent.
  std::int32_t token_id(std::string_view piece) const;
  // The data this tokenizer was built from (token_types filled in): enough to rebuild it
  // with the same hash.
  const SpmVocab& vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string hash_;
};

}  // namespace dark::data
