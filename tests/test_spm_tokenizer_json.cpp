// tokenizer.json for SentencePiece-style BPE (data/spm_tokenizer_json.h): the document's
// structure, and its merges against our own encoders. The reference is a naive BPE written
// here as the tokenizers library runs a BPE model (characters, unknown ones as their <0xXX>
// pieces, then repeatedly the adjacent pair of lowest rank, leftmost on ties) over the
// merges read back from the JSON: it must give SpmTokenizer's ids (random vocabularies, and
// Gemma 3's when the model file is there) and SentencePieceTokenizer's (a model trained
// here), so a wrong merge order fails. tests/hf_tokenizer_check.sh and hf_gemma3_check.sh
// check the same files with transformers itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/sentencepiece_tokenizer.h"
#include "data/spm_tokenizer.h"
#include "data/spm_tokenizer_json.h"
#include "tests/test_util.h"

namespace dark {
namespace {
namespace fs = std::filesystem;
using data::BpeTokenType;
using dark::testing::expect_error;
using data::SpmVocab;
using Ids = std::vector<std::int32_t>;
using nlohmann::json;

constexpr const char* kSpace = "\xE2\x96\x81";  // "▁"

std::int32_t type_id(BpeTokenType t) { return static_cast<std::int32_t>(t); }

// The tokenizers library's BPE, naively, over a parsed tokenizer.json: for one stretch of
// text without added tokens.
class NaiveBpe {
 public:
  explicit NaiveBpe(const json& doc) {
    const json& model = doc.at("model");
    for (const auto& [t, id] : model.at("vocab").items()) ids_[t] = id.get<std::int32_t>();
    const json& merges = model.at("merges");
    for (std::size_t r = 0; r < merges.size(); ++r) {
      std::pair<std::string, std::string> p;
      if (merges[r].is_string()) {
        const std::string m = merges[r].get<std::string>();
        const std::size_t space = m.find(' ');
        p = {m.substr(0, space), m.substr(space + 1)};
      } else {
        p = {merges[r][0].get<std::string>(), merges[r][1].get<std::string>()};
      }
      rank_.emplace(p, r);  // the first of duplicate pairs counts, as in tokenizers
    }
    const json& n = doc.at("normalizer");
    prefix_ = n.at("type") == "Sequence";
  }

  Ids encode(const std::string& text) const {
    std::string s = prefix_ && !text.empty() ? kSpace : "";
    for (const char c : text) s += c == ' ' ? std::string(kSpace) : std::string(1, c);
    std::vector<std::string> sym;
    for (std::size_t i = 0; i < s.size();) {
      const auto lead = static_cast<unsigned char>(s[i]);
      const std::size_t bytes = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      const std::size_t n = std::min(bytes, s.size() - i);
      const std::string ch = s.substr(i, n);
      i += n;
      if (ids_.count(ch)) {
        sym.push_back(ch);
        continue;
      }
      for (const char b : ch) {  // byte fallback
        char piece[8];
        std::snprintf(piece, sizeof piece, "<0x%02X>", static_cast<unsigned char>(b));
        sym.push_back(piece);
      }
    }
    for (;;) {
      std::size_t best = sym.size(), best_rank = SIZE_MAX;
      for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
        const auto it = rank_.find({sym[i], sym[i + 1]});
        if (it != rank_.end() && it->second < best_rank) best = i, best_rank = it->second;
      }
      if (best == sym.size()) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    Ids out;
    for (const std::string& t : sym) out.push_back(ids_.at(t));
    return out;
  }

 private:
  std::unordered_map<std::string, std::int32_t> ids_;
  std::map<std::pair<std::string, std::string>, std::size_t> rank_;
  bool prefix_ = false;
};

// Byte pieces <0x00>..<0xFF> after `specials` (unk, bos, eos), as our trained models have them.
SpmVocab with_bytes_and_specials() {
  SpmVocab v;
  for (const char* s : {"<unk>", "<s>", "</s>"}) {
    v.tokens.push_back(s);
    v.scores.push_back(0.0f);
  }
  v.token_types = {type_id(BpeTokenType::unknown), type_id(BpeTokenType::control), type_id(BpeTokenType::control)};
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    v.tokens.push_back(piece);
    v.scores.push_back(0.0f);
    v.token_types.push_back(type_id(BpeTokenType::byte));
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = false;
  return v;
}

void add_piece(SpmVocab& v, const std::string& t, float score, BpeTokenType type = BpeTokenType::normal) {
  v.tokens.push_back(t);
  v.scores.push_back(score);
  v.token_types.push_back(type_id(type));
}

TEST(SpmTokenizerJson, DocumentHasTheSentencePiecePipeline) {
  SpmVocab v = with_bytes_and_specials();
  for (const char* c : {"a", "b", "c", kSpace}) add_piece(v, c, -100.0f);
  add_piece(v, "ab", -2.0f);
  add_piece(v, "bc", -1.0f);
  add_piece(v, std::string(kSpace) + "a", -3.0f);
  add_piece(v, "<tag>", 0.0f, BpeTokenType::user_defined);
  const json doc = json::parse(data::spm_tokenizer_json(v, {}));
  const json& model = doc.at("model");
  EXPECT_EQ(model.at("type"), "BPE");
  EXPECT_EQ(model.at("byte_fallback"), true);
  EXPECT_EQ(model.at("fuse_unk"), true);
  EXPECT_EQ(model.at("unk_token"), "<unk>");
  EXPECT_EQ(model.at("vocab").size(), v.tokens.size());
  EXPECT_EQ(model.at("vocab").at("<0x0A>"), 3 + 0x0A);
  // Highest score first: bc (-1), ab (-2), ▁a (-3).
  EXPECT_EQ(model.at("merges"), json::array({"b c", "a b", std::string(kSpace) + " a"}));
  EXPECT_EQ(doc.at("normalizer"), json::parse(R"({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})"));
  EXPECT_TRUE(doc.at("pre_tokenizer").is_null());
  EXPECT_TRUE(doc.at("post_processor").is_null());
  EXPECT_EQ(doc.at("decoder").at("decoders").size(), 3u);  // Replace, ByteFallback, Fuse: no Strip
  // Specials (unk, bos, eos) are special added tokens; the user-defined one is not.
  ASSERT_EQ(doc.at("added_tokens").size(), 4u);
  EXPECT_EQ(doc.at("added_tokens")[1].at("content"), "<s>");
  EXPECT_EQ(doc.at("added_tokens")[1].at("special"), true);
  EXPECT_EQ(doc.at("added_tokens")[3].at("content"), "<tag>");
  EXPECT_EQ(doc.at("added_tokens")[3].at("special"), false);
  EXPECT_EQ(doc.at("added_tokens")[3].at("normalized"), false);

  // bos first, and a dummy prefix.
  v.add_space_prefix = true;
  data::SpmJsonOptions options;
  options.bos_first = true;
  const json with = json::parse(data::spm_tokenizer_json(v, options));
  EXPECT_EQ(with.at("post_processor").at("type"), "TemplateProcessing");
  EXPECT_EQ(with.at("post_processor").at("single")[0].at("SpecialToken").at("id"), "<s>");
  EXPECT_EQ(with.at("post_processor").at("special_tokens").at("<s>").at("ids"), json::array({1}));
  EXPECT_EQ(with.at("normalizer").at("normalizers")[0].at("type"), "Prepend");
  EXPECT_EQ(with.at("decoder").at("decoders").back().at("type"), "Strip");

  // A piece with a space needs the [a, b] form of merges.
  add_piece(v, " ", -100.0f, BpeTokenType::user_defined);
  add_piece(v, "a ", -4.0f);
  const json spaced = json::parse(data::spm_tokenizer_json(v, {}));
  EXPECT_EQ(spaced.at("model").at("merges").back(), json::array({"a", " "}));

  SpmVocab no_bos = v;
  no_bos.bos_id = -1;
  expect_error([&] { data::spm_tokenizer_json(no_bos, options); }, {"no bos token"});
  SpmVocab twice = v;
  twice.tokens[264] = "a";
  expect_error([&] { data::spm_tokenizer_json(twice, {}); }, {"token 'a' is both id"});
  SpmVocab unused = v;
  unused.token_types[260] = type_id(BpeTokenType::unused);
  data::SpmJsonOptions library;
  library.merge_into_any_type = false;
  expect_error([&] { data::spm_tokenizer_json(unused, library); }, {"is unused"});
}

// "abc" with ab and bc: SentencePiece takes the higher score; a BPE over our merges must too.
TEST(SpmTokenizerJson, MergeOrderFollowsTheScores) {
  for (const bool bc_first : {true, false}) {
    SpmVocab v = with_bytes_and_specials();
    for (const char* c : {"a", "b", "c"}) add_piece(v, c, -100.0f);
    add_piece(v, "ab", bc_first ? -2.0f : -1.0f);
    add_piece(v, "bc", bc_first ? -1.0f : -2.0f);
    const data::SpmTokenizer spm(v);
    const NaiveBpe bpe(json::parse(data::spm_tokenizer_json(v, {})));
    const Ids ids = spm.encode("abc");
    EXPECT_EQ(ids, bc_first ? Ids({259, 263}) : Ids({262, 261}));
    EXPECT_EQ(bpe.encode("abc"), ids);
  }
}

// Random vocabularies (pieces built by merging random pairs, random distinct scores, some
// characters without a piece): the naive BPE over the written merges gives SpmTokenizer's ids
// on random text; the merges in id order instead (a plausible mistake) do not.
TEST(SpmTokenizerJson, BpeOverTheMergesEncodesLikeSpmTokenizer) {
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", "c", "d", "e", kSpace, "\xC3\xA9", "\xE6\x97\xA5"};
  int compared = 0, id_order_differs = 0;
  for (int trial = 0; trial < 20; ++trial) {
    SpmVocab v = with_bytes_and_specials();
    v.add_space_prefix = trial % 4 == 3;
    std::vector<std::string> pieces;
    for (const std::string& c : alphabet) {
      if (c == "e" && trial % 2) continue;  // "e" then falls back to its byte
      pieces.push_back(c);
    }
    for (int k = 0; k < 60; ++k) {
      const std::string t = pieces[rng() % pieces.size()] + pieces[rng() % pieces.size()];
      if (t.size() <= 12 && std::find(pieces.begin(), pieces.end(), t) == pieces.end()) pieces.push_back(t);
    }
    std::vector<float> scores(pieces.size());
    for (std::size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
    std::shuffle(scores.begin(), scores.end(), rng);
    for (std::size_t i = 0; i < pieces.size(); ++i) add_piece(v, pieces[i], scores[i]);
    const data::SpmTokenizer spm(v);
    const json doc = json::parse(data::spm_tokenizer_json(v, {}));
    const NaiveBpe bpe(doc);
    json by_id = doc;  // the same merges ranked by the merged piece's id
    std::vector<std::pair<std::int64_t, json>> order;
    for (const json& m : doc.at("model").at("merges")) {
      const std::string s = m.get<std::string>();
      const std::string merged = s.substr(0, s.find(' ')) + s.substr(s.find(' ') + 1);
      order.emplace_back(doc.at("model").at("vocab").at(merged).get<std::int64_t>(), m);
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    by_id["model"]["merges"] = json::array();
    for (const auto& [id, m] : order) by_id["model"]["merges"].push_back(m);
    const NaiveBpe wrong(by_id);
    for (int s = 0; s < 50; ++s) {
      std::string text;
      const int len = 1 + static_cast<int>(rng() % 16);
      for (int i = 0; i < len; ++i) {
        const std::string& c = alphabet[rng() % alphabet.size()];
        text += c == kSpace ? std::string(" ") : c;  // a "▁" of the text is SpmTokenizer's space too
      }
      const Ids ids = spm.encode(text);
      ASSERT_EQ(bpe.encode(text), ids) << "trial " << trial << " text '" << text << "'";
      ++compared;
      id_order_differs += wrong.encode(text) != ids;
    }
  }
  std::printf("random vocabularies: %d strings equal; merges in id order differ on %d\n", compared, id_order_differs);
  EXPECT_GT(id_order_differs, 0);
}

// A SentencePiece model trained here (our options: BPE, byte fallback, no dummy prefix).
TEST(SpmTokenizerJson, BpeOverTheMergesEncodesLikeTheTrainedSentencePieceModel) {
  std::vector<std::string> lines;
  for (int i = 0; i < 4; ++i) {
    const std::string text = testing::generated_text(200, i);
    for (std::size_t s = 0, e; s < text.size(); s = e + 1) {
      e = text.find('\n', s);
      if (e == std::string::npos) e = text.size();
      if (e > s) lines.push_back(text.substr(s, e - s));
    }
  }
  data::SentencePieceOptions options;
  options.vocab_size = 400;
  const auto sp = data::SentencePieceTokenizer::train(lines, options);
  const SpmVocab v = data::sentencepiece_vocab(*sp);
  EXPECT_EQ(v.token_types[0], type_id(BpeTokenType::unknown));
  EXPECT_EQ(v.token_types[1], type_id(BpeTokenType::control));
  EXPECT_EQ(v.token_types[3], type_id(BpeTokenType::byte));
  EXPECT_EQ(v.token_types[300], type_id(BpeTokenType::normal));
  EXPECT_FALSE(v.add_space_prefix);
  data::SpmJsonOptions json_options;
  json_options.merge_into_any_type = false;
  const NaiveBpe bpe(json::parse(data::spm_tokenizer_json(v, json_options)));
  std::vector<std::string> texts(lines.begin(), lines.begin() + 200);
  for (const char* s : {"hello world", "  two  spaces ", "tabs\tand\nnewlines\n", "digits 0123456789",
                        "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82", "</s> <s> <unk>", "", " "})
    texts.emplace_back(s);
  int equal = 0;
  for (const std::string& t : texts) {
    const Ids ids = sp->encode(t);
    EXPECT_EQ(bpe.encode(t), ids) << "'" << t << "'";
    equal += bpe.encode(t) == ids;
  }
  std::printf("trained SentencePiece model: %d of %zu strings equal\n", equal, texts.size());
}

// Gemma 3's tokenizer from its GGUF, on the texts of the llama.cpp reference whose ids hold no
// user-defined token (those are cut out before any merging, by both; not the merges' doing).
TEST(SpmTokenizerJson, BpeOverTheMergesEncodesLikeGemma3) {
  const fs::path root = fs::path(DARK_TEST_DATA_DIR).parent_path().parent_path();
  const fs::path gguf = root / "cache/models/gemma3/gemma-3-270m-q4_k_m.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << "no " << gguf << " (scripts/fetch-models.sh gemma3 fetches it)";
  const auto gemma = data::SpmTokenizer::from_gguf(gguf.string());
  const json doc = json::parse(data::spm_tokenizer_json(gemma->vocab(), {}));
  const NaiveBpe bpe(doc);
  std::ifstream in(fs::path(DARK_TEST_DATA_DIR) / "gemma3_tokenizer.json");
  ASSERT_TRUE(in);
  const json ref = json::parse(in);
  int compared = 0;
  for (const json& c : ref.at("cases")) {
    if (!c.contains("text")) continue;  // the hex-coded ones: invalid UTF-8
    const std::string text = c.at("text").get<std::string>();
    const Ids ids = gemma->encode(text);
    bool user_defined = false;
    for (const std::int32_t id : ids) user_defined |= gemma->token_type(id) == BpeTokenType::user_defined;
    if (user_defined || text.find(kSpace) != std::string::npos) continue;
    EXPECT_EQ(bpe.encode(text), ids) << text;
    ++compared;
  }
  std::printf("gemma3: %d reference texts equal\n", compared);
  EXPECT_GE(compared, 10);
}

}  // namespace
}  // namespace dark
