// Hugging Face tokenizer.json (the `tokenizers` library's format) <-> BpeVocab, for byte-level
// BPE: written by export-hf, read when finetuning from a Hugging Face folder (data.tokenizer
// "hf").
//
// What maps onto our BpeTokenizer, and so is read; anything else is an error naming the key:
//   model          {"type": "BPE", byte_fallback false, no continuing_subword_prefix or
//                  end_of_word_suffix, no dropout, ignore_merges false}; merges as "a b"
//                  strings or ["a", "b"] pairs (tokenizers >= 0.20)
//   normalizer     null
//   pre_tokenizer  ByteLevel{add_prefix_space false, use_regex true}             -> pre "gpt2"
//                  Sequence[Digits{individual_digits true}, that ByteLevel]      -> pre "smollm"
//   decoder        ByteLevel
//   added_tokens   special true -> control, special false -> user_defined; lstrip, rstrip
//                  and single_word must be false (we match their text literally)
//   post_processor ignored: it only adds tokens (bos) around a sequence, which encode never does
// tokenizer.json has no bos/eos: load_hf_tokenizer takes them from the files beside it (see
// there). Token types other than control and user-defined are written as normal tokens, so a
// GGUF vocabulary with unknown/unused/byte types does not come back with the same hash.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tokenizer.h"

namespace dark::data {

// tokenizer.json text for `vocab` (ids in order; control tokens special, user-defined not).
// bos_first: a post_processor (TemplateProcessing) that puts vocab.bos_id before every
// sequence, for a model trained with bos at every sequence start (throws without a bos id).
// Throws when a token appears twice (tokenizer.json's vocabulary is a map) or a merge or
// token cannot be represented.
std::string hf_tokenizer_json(const BpeVocab& vocab, bool bos_first = false);

// Parses tokenizer.json text into a BpeVocab with no special ids set (bos, eos, unk, pad -1;
// unk from model.unk_token when it has one); `origin` names the text in errors.
BpeVocab parse_hf_tokenizer_json(std::string_view text, const std::string& origin);

// Loads <dir>/tokenizer.json as a BpeTokenizer of kind "hf", with its special ids from the
// files beside it, first found wins: tokenizer_config.json (bos_token, eos_token, unk_token,
// pad_token: a string or {"content": ...}), special_tokens_map.json (the same), then
// config.json (bos/eos/unk/pad_token_id) and generation_config.json (bos/eos_token_id); an
// id may be an integer or a list, whose first entry is taken. An eos token is required.
std::unique_ptr<BpeTokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path);

// The byte tokenizer (ByteTokenizer: bytes 0..255, <eos> 256, <bos> 257) as byte-level BPE
// without merges: piece byte_encode(b) is id b, so every byte string encodes to its bytes.
// export-hf writes it as tokenizer.json; the one difference from ByteTokenizer is that the
// literal texts "<eos>" and "<bos>" in the input become those tokens.
BpeVocab byte_tokenizer_vocab();

// Pieces of tokenizer.json that every writer here shares (spm_tokenizer_json.cpp too).
namespace tokenizer_json {
// model.vocab: token text -> id, in id order. Throws when a text appears twice.
nlohmann::ordered_json vocab(const std::vector<std::string>& tokens);
// One added_tokens entry, matched literally in the raw text (not normalized, no strip).
nlohmann::ordered_json added_token(std::size_t id, const std::string& content, bool special);
// TemplateProcessing putting token `bos` (id bos_id) before each sequence of one or a pair.
nlohmann::ordered_json bos_post_processor(const std::string& bos, std::int32_t bos_id);
// The document as tokenizer.json text; throws naming invalid UTF-8 in a token or merge.
std::string dump(const nlohmann::ordered_json& doc);
}  // namespace tokenizer_json

}  // namespace dark::data
