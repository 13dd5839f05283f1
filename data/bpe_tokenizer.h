// GPT-2-style byte-level BPE tokenizer, built from plain data or from the tokenizer metadata
// of a GGUF file (tokenizer.ggml.model "gpt2"), e.g. the pretrained SmolLM2-135M-Instruct.
//
// encode(text):
//   1. Special tokens (token type 3 control, 4 user-defined: "<|im_start|>", "<|im_end|>",
//      "<|endoftext|>", ...) are matched literally first, leftmost-longest, and emitted as
//      their ids; the text between them is tokenized separately (as in Hugging Face
//      tokenizers and llama.cpp).
//   2. The rest is pre-tokenized by the GPT-2 regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      implemented by hand over code points (\p{L}, \p{N} general categories and \s =
//      Unicode White_Space, from ICU). Pre-tokenizer "smollm" first isolates every \p{N}
//      code point as its own piece (HF Digits(individual_digits=true)) and applies the regex
//      to the text between them; "gpt2" applies the regex alone.
//      Invalid UTF-8: each bad byte is one code point of class "other" (like U+FFFD); its
//      byte still goes through byte-level BPE, so it round-trips (if its piece exists).
//   3. Each pre-token's bytes are mapped through the GPT-2 byte->unicode table, start as the
//      256 byte tokens and are merged by rank (lowest-rank adjacent pair first, leftmost on
//      ties, until no merge applies; O(n log n) on long pre-tokens).
//      A byte whose piece the vocabulary lacks (SmolLM2 has no piece for 21 bytes: 0x04,
//      0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1..0xFF) is dropped before merging, so
//      its neighbours may merge, as in HF tokenizers with unk_token null (llama.cpp instead
//      lets no merge cross it); such bytes do not round-trip. missing_bytes() lists them.
// encode never adds bos/eos (add_bos_token is recorded: the data pipeline applies it, prepare.h).
// decode: byte-level pieces map back to bytes; control and user-defined tokens give their
// literal text, except bos and eos which decode to nothing (Tokenizer contract), so
// decode(encode(s)) == s for any s without the bos/eos text or bytes lacking a piece.
// Note: special-token text inside ordinary documents is encoded as the special id.
// All methods are const and thread-safe (no caches, no mutable state).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace dark::data {

// GGUF token types (llama.cpp's llama_token_type).
enum class BpeTokenType : std::int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

// Plain data a BpeTokenizer is built from. Tokens are GPT-2 byte->unicode encoded pieces
// ("Ġthe" for " the"); merges are "left right" in rank order (rank = index).
struct BpeVocab {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  std::vector<std::int32_t> token_types;  // empty: all normal; else one per token (BpeTokenType)
  std::int32_t bos_id = -1;               // -1: none
  std::int32_t eos_id = -1;               // required
  std::int32_t unk_id = -1;               // -1: none (informational: encode never emits it)
  std::int32_t pad_id = -1;               // -1: none
  std::string pre = "gpt2";               // pre-tokenizer: "gpt2" or "smollm"
  bool add_bos = false;                   // GGUF tokenizer.ggml.add_bos_token / HF add_bos_token (data.bos "auto")
  std::string kind = "gguf";              // what kind() reports: "gguf" or "hf" (tokenizer.json); not hashed
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Validates the data: at least one token, types in 1..6, special ids in range (eos
  // required), every merge "a b" with a, b and ab in the vocabulary, a known pre-tokenizer.
  // Throws dark::Error naming the offending item.
  explicit BpeTokenizer(BpeVocab vocab);
  ~BpeTokenizer() override;

  // Reads tokenizer.ggml.* from a GGUF file. Accepts model "gpt2" with pre "smollm" or "gpt2";
  // anything else is an error listing what is supported. Defined in bpe_tokenizer_gguf.cpp.
  static std::unique_ptr<BpeTokenizer> from_gguf(const std::string& path);
  // Pre-tokenizer names accepted by BpeVocab::pre / tokenizer.ggml.pre.
  static const std::vector<std::string>& supported_pre();

  // The kind load_tokenizer takes to load it again: "gguf" (with the .gguf path) or "hf"
  // (with the tokenizer.json path), as BpeVocab::kind says.
  std::string kind() const override;
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override;
  std::int32_t eos_id() const override;
  std::int32_t bos_id() const override;
  // "gguf-bpe-<FNV-1a64 of pre, tokens, types, merges and special ids>".
  std::string hash() const override { return hash_; }
  // The token text as stored in the vocabulary ("Ġthe", "<|im_end|>"). Throws out of range.
  std::string piece(std::int32_t id) const override;

  std::int32_t unk_id() const;
  std::int32_t pad_id() const;
  const std::string& pre() const;
  bool add_bos() const override;
  BpeTokenType token_type(std::int32_t id) const;
  // Bytes without a piece in the vocabulary (dropped by encode), ascending.
  const std::vector<unsigned char>& missing_bytes() const;
  // Id of a piece given in vocabulary form ("Ġthe"), -1 when absent.
  std::int32_t token_id(std::string_view piece) const;
  // The data this tokenizer was built from (token_types filled in): enough to rebuild it
  // with the same hash, or to write it in another format.
  const BpeVocab& vocab() const;

  // Pre-tokenizer pieces of `text` (no special-token matching), as views into `text`.
  // Exposed for tests.
  std::vector<std::string_view> pre_tokenize(std::string_view text) const;
  static std::vector<std::string_view> pre_tokenize(std::string_view text, const std::string& pre);

  // GPT-2 byte->unicode table: the code point standing for byte b in vocabulary pieces.
  static char32_t byte_to_unicode(unsigned char b);
  // Maps bytes to their vocabulary form: byte_encode(" hi") == "Ġhi".
  static std::string byte_encode(std::string_view bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string hash_;
};

}  // namespace dark::data
