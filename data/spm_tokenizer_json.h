// Hugging Face tokenizer.json (the `tokenizers` library's format) for SentencePiece-style BPE:
// the tokenizer of a SentencePiece model trained here (SentencePieceTokenizer) and the one
// read from a GGUF (SpmTokenizer, e.g. Gemma 3's). Written by export-hf; transformers loads
// it with the tokenizers library alone (no sentencepiece, no protobuf).
//
// What is written, and why it encodes as we do:
//   model          BPE over the pieces, byte_fallback true (a character that is no piece
//                  becomes its <0xXX> pieces), fuse_unk true, unk_token the unknown piece.
//                  Merges are derived from the scores: every split of a piece into two
//                  pieces (at a UTF-8 character boundary) is a merge, ranked by the merged
//                  piece's score, highest first. SentencePiece repeatedly merges the adjacent
//                  pair whose concatenation has the highest score (ties: leftmost); the
//                  tokenizers library repeatedly applies the adjacent pair of lowest rank
//                  (ties: leftmost), so the two agree whenever different pieces have
//                  different scores (true of trained SentencePiece models, whose score is
//                  minus the merge step, and of Gemma 3's normal pieces). Splits of the same
//                  piece rank next to each other (by the left part's length), which changes
//                  nothing: two splits of one piece never overlap. Pieces with equal scores
//                  rank by id: SentencePiece orders those by position, which no rank can do.
//   normalizer     Replace " " -> "▁" (with add_space_prefix, Prepend "▁" first: once per
//                  stretch of text between added tokens, as SpmTokenizer puts it in front of
//                  each fragment); pre_tokenizer null: the text is merged whole.
//   added_tokens   control, unknown and unused pieces (special: true) and user-defined ones
//                  (special: false), matched in the raw text. transformers with
//                  split_special_tokens true (export-hf's tokenizer_config.json) leaves
//                  special-token text to the model, as our encode does; user-defined tokens
//                  are cut out of the text first, as in SpmTokenizer (which takes them longest
//                  first where tokenizers takes the leftmost longest: they differ only where
//                  two such tokens overlap in the text).
//   decoder        Replace "▁" -> " ", ByteFallback, Fuse (and Strip one leading space with
//                  add_space_prefix).
//   post_processor with bos_first, TemplateProcessing putting bos before every sequence.
// Known difference: SentencePieceTokenizer writes a "▁" of the text itself as its three byte
// pieces (so it decodes back to "▁"); here, as in the sentencepiece library, it is the space
// piece.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "data/sentencepiece_tokenizer.h"
#include "data/spm_tokenizer.h"

namespace dark::data {

struct SpmJsonOptions {
  // A post_processor putting bos first (the model was trained with bos at every sequence
  // start); the vocabulary's own add_bos / add_eos are not used.
  bool bos_first = false;
  // Which pieces a merge may form: llama.cpp's SPM (SpmTokenizer) merges into a piece of any
  // type; the sentencepiece library only into normal, user-defined and unused ones (it then
  // splits unused ones again, which merges cannot express: the writer refuses unused pieces
  // in that mode).
  bool merge_into_any_type = true;
};

// The merges of `vocab` in rank order (see above): (left, right) pairs.
std::vector<std::pair<std::string, std::string>> spm_merges(const SpmVocab& vocab, bool merge_into_any_type);

// tokenizer.json text for `vocab` (its ids, scores and types; bos, eos, unk, add_space_prefix).
// Throws when a piece appears twice, bos_first is set without a bos id, or a piece is not
// valid UTF-8.
std::string spm_tokenizer_json(const SpmVocab& vocab, const SpmJsonOptions& options);

// A trained SentencePiece model's pieces as an SpmVocab (scores, types, special ids;
// add_space_prefix when the model adds a dummy prefix; add_bos false).
SpmVocab sentencepiece_vocab(const SentencePieceTokenizer& sp);

}  // namespace dark::data
