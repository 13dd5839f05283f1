// tokenizer.json writer for SentencePiece-style BPE (see spm_tokenizer_json.h).
#include "data/spm_tokenizer_json.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "data/hf_tokenizer_json.h"
#include "data/space_symbol.h"

namespace dark::data {
using ordered_json = nlohmann::ordered_json;

namespace {

BpeTokenType type_of(const SpmVocab& v, std::size_t id) {
  return v.token_types.empty() ? BpeTokenType::normal : static_cast<BpeTokenType>(v.token_types[id]);
}

ordered_json replace(std::string_view pattern, std::string_view content) {
  return {{"type", "Replace"}, {"pattern", {{"String", pattern}}}, {"content", content}};
}

}  // namespace

std::vector<std::pair<std::string, std::string>> spm_merges(const SpmVocab& v, bool merge_into_any_type) {
  const std::size_t n = v.tokens.size();
  DARK_CHECK(v.scores.size() == n, "tokenizer.json: ", v.scores.size(), " scores for ", n, " pieces");
  DARK_CHECK(v.token_types.empty() || v.token_types.size() == n, "tokenizer.json: ", v.token_types.size(),
             " token types for ", n, " pieces");
  std::unordered_map<std::string_view, std::size_t> ids;
  ids.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    if (!v.tokens[i].empty()) ids.emplace(v.tokens[i], i);
  struct Merge {
    float score;
    std::size_t id;     // of the merged piece
    std::size_t split;  // bytes of the left part
  };
  std::vector<Merge> merges;
  for (std::size_t i = 0; i < n; ++i) {
    const BpeTokenType type = type_of(v, i);
    if (!merge_into_any_type) {
      DARK_CHECK(type != BpeTokenType::unused, "tokenizer.json: piece ", i, " '", v.tokens[i],
                 "' is unused: the sentencepiece library forms it and splits it again, which merges cannot express");
      if (type != BpeTokenType::normal && type != BpeTokenType::user_defined) continue;
    }
    const std::string_view t = v.tokens[i];
    for (std::size_t k = t.empty() ? 0 : char_bytes(static_cast<unsigned char>(t[0])); k < t.size();
         k += char_bytes(static_cast<unsigned char>(t[k])))
      if (ids.count(t.substr(0, k)) && ids.count(t.substr(k))) merges.push_back({v.scores[i], i, k});
  }
  // Highest score first; equal scores by id, then by split (see the header).
  std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.id != b.id ? a.id < b.id : a.split < b.split;
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const Merge& m : merges) {
    const std::string& t = v.tokens[m.id];
    out.emplace_back(t.substr(0, m.split), t.substr(m.split));
  }
  return out;
}

std::string spm_tokenizer_json(const SpmVocab& v, const SpmJsonOptions& options) {
  const std::size_t n = v.tokens.size();
  auto has = [&](std::int32_t id) { return id >= 0 && static_cast<std::size_t>(id) < n; };
  DARK_CHECK(!options.bos_first || has(v.bos_id),
             "tokenizer.json: bos first was asked for but the vocabulary has no bos token (bos id ", v.bos_id, ")");
  const std::vector<std::pair<std::string, std::string>> pairs = spm_merges(v, options.merge_into_any_type);

  ordered_json added = ordered_json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const BpeTokenType type = type_of(v, i);
    if (type == BpeTokenType::control || type == BpeTokenType::unknown || type == BpeTokenType::unused ||
        type == BpeTokenType::user_defined)
      added.push_back(tokenizer_json::added_token(i, v.tokens[i], type != BpeTokenType::user_defined));
  }
  // "a b" strings read by every tokenizers version; [a, b] pairs (tokenizers >= 0.20) only
  // when some piece holds a space, which the string form cannot.
  const bool as_pairs = std::any_of(pairs.begin(), pairs.end(), [](const auto& p) {
    return p.first.find(' ') != std::string::npos || p.second.find(' ') != std::string::npos;
  });
  ordered_json merges = ordered_json::array();
  auto& merge_list = merges.get_ref<ordered_json::array_t&>();
  merge_list.reserve(pairs.size());
  for (const auto& [a, b] : pairs) {
    if (as_pairs) {
      merge_list.push_back(ordered_json::array({a, b}));
    } else {
      merge_list.emplace_back(a + " " + b);
    }
  }
  const ordered_json space_to_symbol = replace(" ", kSpaceSymbol);
  const ordered_json normalizer =
      v.add_space_prefix
          ? ordered_json{{"type", "Sequence"},
                         {"normalizers", ordered_json::array({{{"type", "Prepend"}, {"prepend", kSpaceSymbol}},
                                                              space_to_symbol})}}
          : space_to_symbol;
  ordered_json decoders = ordered_json::array({replace(kSpaceSymbol, " "), {{"type", "ByteFallback"}},
                                               {{"type", "Fuse"}}});
  if (v.add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  const ordered_json post_processor =
      options.bos_first ? tokenizer_json::bos_post_processor(v.tokens[v.bos_id], v.bos_id) : ordered_json();
  const ordered_json doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", normalizer},
      {"pre_tokenizer", nullptr},
      {"post_processor", post_processor},
      {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", has(v.unk_id) ? ordered_json(v.tokens[v.unk_id]) : ordered_json()},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", tokenizer_json::vocab(v.tokens)},
        {"merges", merges}}}};
  return tokenizer_json::dump(doc);
}

SpmVocab sentencepiece_vocab(const SentencePieceTokenizer& sp) {
  SpmVocab v;
  const std::int32_t n = sp.vocab_size();
  v.tokens.reserve(n);
  v.scores.reserve(n);
  v.token_types.reserve(n);
  for (std::int32_t i = 0; i < n; ++i) {
    v.tokens.push_back(sp.piece(i));
    v.scores.push_back(sp.score(i));
    v.token_types.push_back(static_cast<std::int32_t>(sp.token_type(i)));
  }
  v.bos_id = sp.bos_id();
  v.eos_id = sp.eos_id();
  v.unk_id = sp.unk_id();
  v.add_bos = false;
  // A model trained with add_dummy_prefix (Llama 2's) gives "▁" first on any text; ours not.
  const std::vector<std::int32_t> a = sp.encode("a");
  v.add_space_prefix = !a.empty() && sp.piece(a.front()).starts_with(kSpaceSymbol);
  return v;
}

}  // namespace dark::data
