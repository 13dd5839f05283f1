// SentencePiece-style GGUF tokenizer (data/spm_tokenizer.h): a tiny hand-built vocabulary
// (score order, leftmost ties, the user-defined token split order, byte and unk fallback,
// space prefix, decode rules), random texts against a naive O(n^2) merge written here,
// validation errors, small GGUF files written with tests/gguf_test_writer.h (bad metadata,
// load_tokenizer's dispatch on tokenizer.ggml.model), the tokenizer.spm.json round trip, a
// prepared data folder that reopens with its tokenizer, and the Gemma 3 270M GGUF against
// llama.cpp's ids and detokenized text, made by
// tests/reference/make_gemma3_tokenizer_reference.py (skipped without the model file).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/prepare.h"
#include "data/spm_tokenizer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_file.h"
#include "gguf_test_writer.h"
#include "test_util.h"

namespace dark::data {
namespace {

using Ids = std::vector<std::int32_t>;
using dark::testing::expect_error;
using dark::testing::GgufTestWriter;
using dark::testing::TempDir;
namespace fs = std::filesystem;

const std::string kSp = "\xE2\x96\x81";  // U+2581

// ---- a tiny vocabulary ----
// 0 <pad>, 1 <eos>, 2 <bos> (control), 3 <unk> (unknown), 4 "XYZ", 5 "WX", 6 "  " (two
// spaces; user-defined), 7..262 the byte tokens <0x00>..<0xFF>, then normal pieces.
constexpr std::int32_t kByte0 = 7;
std::int32_t byte_id(unsigned char b) { return kByte0 + b; }
enum : std::int32_t { kSpace = 263, kA, kB, kC, kAB, kBC, kABC, kAA, kSpA, kSpAB, kEAcute, kUnused };

SpmVocab tiny_vocab() {
  SpmVocab v;
  auto add = [&](const std::string& t, float score, int type) {
    v.tokens.push_back(t);
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<pad>", 0, 3);
  add("<eos>", 0, 3);
  add("<bos>", 0, 3);
  add("<unk>", 0, 2);
  add("XYZ", 0, 4);
  add("WX", 0, 4);
  add("  ", 0, 4);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0, 6);
  }
  add(kSp, -1, 1);
  add("a", -1, 1);
  add("b", -1, 1);
  add("c", -1, 1);
  add("ab", -3, 1);
  add("bc", -2, 1);
  add("abc", -4, 1);
  add("aa", -6, 1);
  add(kSp + "a", -5, 1);
  add(kSp + "ab", -4.5f, 1);
  add("\xC3\xA9", -1, 1);  // é
  add("<unused0>", 0, 5);
  v.pad_id = 0;
  v.eos_id = 1;
  v.bos_id = 2;
  v.unk_id = 3;
  return v;
}

TEST(SpmTokenizer, MergesTheHighestScoringPairFirstAndTiesLeftmost) {
  const SpmTokenizer t(tiny_vocab());
  // "bc" (-2) before "ab" (-3), then a + bc = "abc".
  EXPECT_EQ(t.encode("abc"), (Ids{kABC}));
  EXPECT_EQ(t.encode("ab"), (Ids{kAB}));
  // Spaces become U+2581; no piece "b▁" or "▁c".
  EXPECT_EQ(t.encode("ab c"), (Ids{kAB, kSpace, kC}));
  // aa + a: the leftmost of two equal pairs.
  EXPECT_EQ(t.encode("aaa"), (Ids{kAA, kA}));
  EXPECT_EQ(t.encode("aaaa"), (Ids{kAA, kAA}));
  // "▁ab" comes from "▁" + "ab" (ab merges first at -3, then ▁ab at -4.5).
  EXPECT_EQ(t.encode(" ab"), (Ids{kSpAB}));
  EXPECT_EQ(t.encode(""), Ids{});
  // U+2581 in the text is the same symbol as a space.
  EXPECT_EQ(t.encode(kSp + "ab"), (Ids{kSpAB}));
  EXPECT_EQ(t.encode("\xC3\xA9"), (Ids{kEAcute}));
}

TEST(SpmTokenizer, SplitsUserDefinedTokensLongestFirstNotLeftmost) {
  const SpmTokenizer t(tiny_vocab());
  // "XYZ" (3 bytes) is cut out before "WX" (2) is looked for: W + [XYZ], not [WX] + YZ.
  EXPECT_EQ(t.encode("WXYZ"), (Ids{byte_id('W'), 4}));
  EXPECT_EQ(t.encode("WXW"), (Ids{5, byte_id('W')}));
  // Two spaces are a user-defined token, matched before spaces become U+2581.
  EXPECT_EQ(t.encode("a  b"), (Ids{kA, 6, kB}));
  EXPECT_EQ(t.encode("a   b"), (Ids{kA, 6, kSpace, kB}));
  EXPECT_EQ(t.encode("    "), (Ids{6, 6}));
  // Control and unknown token text is ordinary text (parse_special = false).
  const Ids eos = t.encode("<eos>");
  EXPECT_EQ(eos.size(), 5u);
  EXPECT_EQ(eos[0], byte_id('<'));
}

TEST(SpmTokenizer, FallsBackToBytesByLeadByteCharacters) {
  const SpmTokenizer t(tiny_vocab());
  EXPECT_EQ(t.encode("x"), (Ids{byte_id('x')}));
  // ê is not a piece: its two UTF-8 bytes.
  EXPECT_EQ(t.encode("\xC3\xAA"), (Ids{byte_id(0xC3), byte_id(0xAA)}));
  // 0xFF claims 4 bytes (3 here, cut at the end): one symbol, so "ab" does not merge.
  EXPECT_EQ(t.encode("\xFF" "ab"), (Ids{byte_id(0xFF), byte_id('a'), byte_id('b')}));
  EXPECT_EQ(t.encode("ab\xFF"), (Ids{kAB, byte_id(0xFF)}));
  // A continuation byte alone is one symbol.
  EXPECT_EQ(t.encode("\x80" "ab"), (Ids{byte_id(0x80), kAB}));

  // Without byte tokens: unk, and without unk the byte is dropped.
  SpmVocab v = tiny_vocab();
  for (int b = 0; b < 256; ++b) v.tokens[byte_id(b)] = "<byte" + std::to_string(b) + ">", v.token_types[byte_id(b)] = 1;
  EXPECT_EQ(SpmTokenizer(v).encode("xab"), (Ids{3, kAB}));
  v.unk_id = -1;
  EXPECT_EQ(SpmTokenizer(v).encode("xab"), (Ids{kAB}));
}

TEST(SpmTokenizer, TokenizeAddsBosAndEosAsRecorded) {
  SpmVocab v = tiny_vocab();
  const SpmTokenizer t(v);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.tokenize("ab", true), (Ids{2, kAB}));
  EXPECT_EQ(t.tokenize("ab", false), (Ids{kAB}));
  EXPECT_EQ(t.tokenize("", true), (Ids{2}));
  v.add_eos = true;
  EXPECT_EQ(SpmTokenizer(v).tokenize("ab", true), (Ids{2, kAB, 1}));
  v.add_bos = false;
  EXPECT_EQ(SpmTokenizer(v).tokenize("ab", true), (Ids{kAB, 1}));
}

TEST(SpmTokenizer, SpacePrefixGoesBeforeEachFragmentAfterATokenAndComesOffInDecode) {
  SpmVocab v = tiny_vocab();
  v.add_space_prefix = true;
  const SpmTokenizer t(v);
  EXPECT_EQ(t.encode("ab"), (Ids{kSpAB}));
  // First fragment "a" -> "▁a"; after the user-defined "  ", "b" -> "▁b" (no such piece).
  EXPECT_EQ(t.encode("a  b"), (Ids{kSpA, 6, kSpace, kB}));
  EXPECT_EQ(t.decode(Ids{kSpAB}), "ab");
  EXPECT_EQ(t.decode(Ids{kA, kSpAB}), "a ab");
  EXPECT_EQ(t.decode(t.encode("ab c")), "ab c");
}

TEST(SpmTokenizer, DecodesPiecesBytesAndUserTokensAndDropsControlTokens) {
  const SpmTokenizer t(tiny_vocab());
  EXPECT_EQ(t.decode(Ids{2, kSpA, 6, kABC, 1, byte_id('\n'), 0, 3, kUnused, byte_id(0xC3), byte_id(0xA9)}),
            " a  abc\n\xC3\xA9");
  EXPECT_EQ(t.decode(Ids{4, 5}), "XYZWX");
  expect_error([&] { t.decode(Ids{static_cast<std::int32_t>(t.vocab_size())}); }, {"outside the vocabulary"});
  expect_error([&] { t.decode(Ids{-1}); }, {"outside the vocabulary"});
  EXPECT_EQ(t.piece(kSpA), kSp + "a");
  EXPECT_EQ(t.token_id(kSp + "ab"), kSpAB);
  EXPECT_EQ(t.token_id("nope"), -1);
  EXPECT_EQ(t.token_type(6), BpeTokenType::user_defined);
  EXPECT_EQ(t.score(kAB), -3.0f);
  for (const std::string s : {"abc ab  a", "  leading", "trailing  ", "\xC3\xA9 x\ty\n", "\xC3\xAA\xF0\x9F\x98\x80"})
    EXPECT_EQ(t.decode(t.encode(s)), s) << s;
}

// ---- against a naive merge ----

// The same rules written the slow way: rescan every adjacent pair for the best one each step.
Ids naive_encode(const SpmVocab& v, const std::string& text) {
  std::map<std::string, std::int32_t> ids;
  for (std::size_t i = 0; i < v.tokens.size(); ++i) ids[v.tokens[i]] = static_cast<std::int32_t>(i);
  std::string s;
  for (const char c : text) s += c == ' ' ? kSp : std::string(1, c);
  std::vector<std::string> sym;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t n = std::min<std::size_t>(b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4, s.size() - i);
    sym.push_back(s.substr(i, n));
    i += n;
  }
  for (;;) {
    std::size_t best = sym.size();
    float best_score = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = ids.find(sym[i] + sym[i + 1]);
      if (it == ids.end()) continue;
      const float score = v.scores[it->second];
      if (best == sym.size() || score > best_score) best = i, best_score = score;
    }
    if (best == sym.size()) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  Ids out;
  for (const std::string& p : sym) {
    const auto it = ids.find(p);
    if (it != ids.end()) {
      out.push_back(it->second);
      continue;
    }
    for (const char c : p) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(c));
      out.push_back(ids.at(name));
    }
  }
  return out;
}

TEST(SpmTokenizer, MatchesANaiveMergeOnRandomTexts) {
  // A denser vocabulary: every 2- and 3-letter string over {a, b, c, ▁} with pseudo-random
  // scores (many ties), no user-defined tokens.
  SpmVocab v = tiny_vocab();
  v.token_types[4] = v.token_types[5] = v.token_types[6] = 1;
  v.tokens[4] = "zz4", v.tokens[5] = "zz5", v.tokens[6] = "zz6";
  const std::vector<std::string> letters = {"a", "b", "c", kSp};
  std::mt19937 rng(7);
  auto add = [&](const std::string& t) {
    if (std::find(v.tokens.begin(), v.tokens.end(), t) != v.tokens.end()) return;
    v.tokens.push_back(t);
    v.scores.push_back(-static_cast<float>(rng() % 8));
    v.token_types.push_back(1);
  };
  for (const auto& x : letters)
    for (const auto& y : letters) {
      add(x + y);
      for (const auto& z : letters)
        if (rng() % 3 == 0) add(x + y + z);
    }
  // The same with more than 64 pieces holding an inner "▁" (fragments are then merged whole,
  // not cut into words): those pieces never occur in the texts, so the ids are the same.
  SpmVocab many = v;
  for (int i = 0; i < 70; ++i) {
    many.tokens.push_back("q" + std::to_string(i) + kSp);
    many.scores.push_back(-1);
    many.token_types.push_back(1);
  }
  const SpmTokenizer t(v), whole(many);
  const std::string alphabet[] = {"a", "b", "c", " ", "d", "\xC3\xA9", "\xFF"};
  for (int round = 0; round < 400; ++round) {
    std::string text;
    const int len = round < 300 ? static_cast<int>(rng() % 24) : 200 + static_cast<int>(rng() % 300);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % (round % 2 ? 7 : 4)];
    const Ids want = naive_encode(v, text);
    const std::string shown = nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    ASSERT_EQ(t.encode(text), want) << "text: " << shown;
    ASSERT_EQ(whole.encode(text), want) << "text: " << shown;
  }
}

// ---- validation ----

TEST(SpmTokenizer, RejectsBadVocabularies) {
  auto with = [](const std::function<void(SpmVocab&)>& change) {
    SpmVocab v = tiny_vocab();
    change(v);
    return [v] { SpmTokenizer t(v); };
  };
  expect_error(with([](SpmVocab& v) { v.tokens.clear(), v.scores.clear(), v.token_types.clear(); }), {"0 tokens"});
  expect_error(with([](SpmVocab& v) { v.scores.pop_back(); }), {"scores for"});
  expect_error(with([](SpmVocab& v) { v.scores[9] = std::numeric_limits<float>::quiet_NaN(); }), {"token 9", "score"});
  expect_error(with([](SpmVocab& v) { v.scores[9] = std::numeric_limits<float>::infinity(); }), {"token 9", "score"});
  expect_error(with([](SpmVocab& v) { v.token_types.pop_back(); }), {"token types for"});
  expect_error(with([](SpmVocab& v) { v.token_types[5] = 7; }), {"token 5", "type 7"});
  expect_error(with([](SpmVocab& v) { v.token_types[5] = 6; }), {"token 5", "<0xXX>"});
  expect_error(with([](SpmVocab& v) { v.tokens[kB] = "a"; }), {"same text"});
  expect_error(with([](SpmVocab& v) { v.eos_id = -1; }), {"eos id -1"});
  expect_error(with([](SpmVocab& v) { v.bos_id = 100000; }), {"bos id 100000"});
  expect_error(with([](SpmVocab& v) { v.bos_id = -1; }), {"add_bos", "no bos"});
  SpmVocab ok = tiny_vocab();
  ok.bos_id = -1;
  ok.add_bos = false;
  EXPECT_EQ(SpmTokenizer(ok).bos_id(), -1);
}

TEST(SpmTokenizer, HashIsStableAndCoversScoresTypesAndFlags) {
  const SpmTokenizer a(tiny_vocab()), b(tiny_vocab());
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hash().rfind("gguf-spm-", 0), 0u);
  EXPECT_LE(a.hash().size(), 63u);
  EXPECT_EQ(a.kind(), "gguf");
  for (const auto& change : std::vector<std::function<void(SpmVocab&)>>{
           [](SpmVocab& v) { v.scores[kAB] = -3.5f; }, [](SpmVocab& v) { v.token_types[kA] = 4; },
           [](SpmVocab& v) { v.tokens[kC] = "d"; }, [](SpmVocab& v) { v.add_space_prefix = true; },
           [](SpmVocab& v) { v.add_eos = true; }, [](SpmVocab& v) { v.pad_id = -1; }}) {
    SpmVocab v = tiny_vocab();
    change(v);
    EXPECT_NE(SpmTokenizer(v).hash(), a.hash());
  }
}

// ---- GGUF files ----

// The tokenizer.ggml.* metadata of a "llama" GGUF file, each part removable or replaceable.
struct SpmGguf {
  std::string model = "llama";
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<std::int32_t> types;
  bool with_scores = true, with_types = true;
  std::map<std::string, std::uint64_t> ids = {{"tokenizer.ggml.bos_token_id", 2},
                                              {"tokenizer.ggml.eos_token_id", 1},
                                              {"tokenizer.ggml.unknown_token_id", 3},
                                              {"tokenizer.ggml.padding_token_id", 0}};
  std::map<std::string, bool> flags = {{"tokenizer.ggml.add_bos_token", true},
                                       {"tokenizer.ggml.add_eos_token", false},
                                       {"tokenizer.ggml.add_space_prefix", false}};

  SpmGguf() {
    const SpmVocab v = tiny_vocab();
    tokens = v.tokens;
    scores = v.scores;
    types = v.token_types;
  }
  std::string write(const TempDir& tmp, const std::string& name) const {
    GgufTestWriter w;
    w.kv_string("general.architecture", "gemma3");
    w.kv_string("tokenizer.ggml.model", model);
    w.kv_string("tokenizer.ggml.pre", "default");
    w.kv_raw("tokenizer.ggml.tokens", dark::testing::kGgufArray, GgufTestWriter::string_array_payload(tokens));
    if (with_scores)
      w.kv_raw("tokenizer.ggml.scores", dark::testing::kGgufArray,
               GgufTestWriter::array_payload<float>(dark::testing::kGgufF32, scores));
    if (with_types)
      w.kv_raw("tokenizer.ggml.token_type", dark::testing::kGgufArray,
               GgufTestWriter::array_payload<std::int32_t>(dark::testing::kGgufI32, types));
    for (const auto& [key, id] : ids) w.kv<std::uint32_t>(key, dark::testing::kGgufU32, static_cast<std::uint32_t>(id));
    for (const auto& [key, on] : flags) w.kv<std::uint8_t>(key, dark::testing::kGgufBool, on ? 1 : 0);
    const std::string path = tmp / name;
    dark::testing::write_bytes(path, w.build().bytes);
    return path;
  }
};

TEST(SpmTokenizerGguf, LoadsThroughLoadTokenizerWithLlamaCppDefaults) {
  TempDir tmp;
  SpmGguf g;
  g.tokens.push_back("</s>");  // user-defined in the file; llama.cpp makes it control
  g.scores.push_back(0);
  g.types.push_back(4);
  const std::string path = g.write(tmp, "tiny.gguf");
  const auto loaded = load_tokenizer("gguf", path);
  const auto* t = dynamic_cast<const SpmTokenizer*>(loaded.get());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind(), "gguf");
  EXPECT_EQ(t->hash(), SpmTokenizer::from_gguf(path)->hash());
  EXPECT_EQ(t->vocab_size(), kUnused + 2);
  EXPECT_EQ(t->bos_id(), 2);
  EXPECT_EQ(t->eos_id(), 1);
  EXPECT_EQ(t->unk_id(), 3);
  EXPECT_EQ(t->pad_id(), 0);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_FALSE(t->add_space_prefix());
  EXPECT_EQ(t->token_type(kUnused + 1), BpeTokenType::control);
  EXPECT_EQ(t->encode("a  b"), (Ids{kA, 6, kB}));
  EXPECT_EQ(t->encode("</s>").size(), 4u);  // not split out
  EXPECT_EQ(t->decode(Ids{kUnused + 1}), "");

  // Absent flags take llama.cpp's defaults for "llama": add_bos and add_space_prefix true.
  g.flags.clear();
  const auto d = SpmTokenizer::from_gguf(g.write(tmp, "defaults.gguf"));
  EXPECT_TRUE(d->add_bos());
  EXPECT_FALSE(d->add_eos());
  EXPECT_TRUE(d->add_space_prefix());
  EXPECT_EQ(d->encode("ab"), (Ids{kSpAB}));
  // Ids written as u32 0xFFFFFFFF mean none.
  g.ids["tokenizer.ggml.padding_token_id"] = UINT32_MAX;
  EXPECT_EQ(SpmTokenizer::from_gguf(g.write(tmp, "nopad.gguf"))->pad_id(), -1);
  // Without token types every token is normal (no byte tokens: unk fallback).
  g.with_types = false;
  EXPECT_EQ(SpmTokenizer::from_gguf(g.write(tmp, "notypes.gguf"))->token_type(4), BpeTokenType::normal);
}

TEST(SpmTokenizerGguf, BadMetadataIsAnErrorNamingTheFileAndKey) {
  TempDir tmp;
  auto fails = [&](const std::function<void(SpmGguf&)>& change, const std::vector<std::string>& parts) {
    SpmGguf g;
    change(g);
    const std::string path = g.write(tmp, "bad.gguf");
    std::vector<std::string> want = parts;
    want.push_back(path);
    expect_error([&] { load_tokenizer("gguf", path); }, want);
  };
  fails([](SpmGguf& g) { g.with_scores = false; }, {"tokenizer.ggml.scores is missing"});
  fails([](SpmGguf& g) { g.scores.pop_back(); }, {"tokenizer.ggml.scores has", "entries for"});
  fails([](SpmGguf& g) { g.scores[8] = std::numeric_limits<float>::infinity(); }, {"tokenizer.ggml.scores[8]"});
  fails([](SpmGguf& g) { g.types.push_back(1); }, {"tokenizer.ggml.token_type has", "entries for"});
  fails([](SpmGguf& g) { g.types[3] = 9; }, {"tokenizer.ggml.token_type[3] is 9"});
  fails([](SpmGguf& g) { g.types[3] = -1; }, {"tokenizer.ggml.token_type[3] is -1"});
  fails([](SpmGguf& g) { g.ids.erase("tokenizer.ggml.eos_token_id"); }, {"tokenizer.ggml.eos_token_id is missing"});
  fails([](SpmGguf& g) { g.ids["tokenizer.ggml.eos_token_id"] = 5000; },
        {"tokenizer.ggml.eos_token_id is 5000", "outside the vocabulary"});
  fails([](SpmGguf& g) { g.ids["tokenizer.ggml.unknown_token_id"] = 4000000000u; },
        {"tokenizer.ggml.unknown_token_id is 4000000000"});
  fails([](SpmGguf& g) { g.ids.erase("tokenizer.ggml.bos_token_id"); },
        {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id is missing"});
  fails([](SpmGguf& g) { g.tokens[kC] = "a"; }, {"same text"});
  fails([](SpmGguf& g) { g.tokens[byte_id(0)] = "<0x0G>"; }, {"type 6 (byte)", "<0xXX>"});
  fails([](SpmGguf& g) { g.tokens.clear(), g.scores.clear(), g.types.clear(); }, {"tokenizer.ggml.tokens has 0 tokens"});
  // load_tokenizer dispatches on tokenizer.ggml.model.
  fails([](SpmGguf& g) { g.model = "bert"; },
        {"tokenizer.ggml.model is 'bert'", "supported", "\"gpt2\"", "\"llama\""});
  expect_error([] { load_tokenizer("gguf", "/nonexistent/model.gguf"); }, {"/nonexistent/model.gguf"});
  GgufTestWriter w;
  w.kv_string("general.architecture", "llama");
  dark::testing::write_bytes(tmp / "nomodel.gguf", w.build().bytes);
  expect_error([&] { load_tokenizer("gguf", tmp / "nomodel.gguf"); }, {"nomodel.gguf", "tokenizer.ggml.model"});
}

TEST(SpmTokenizerGguf, Gpt2ModelStillLoadsTheByteLevelBpe) {
  TempDir tmp;
  std::vector<std::string> tokens = {"<|endoftext|>"};
  for (int b = 0; b < 256; ++b) tokens.push_back(BpeTokenizer::byte_encode(std::string(1, static_cast<char>(b))));
  GgufTestWriter w;
  w.kv_string("tokenizer.ggml.model", "gpt2");
  w.kv_string("tokenizer.ggml.pre", "gpt2");
  w.kv_raw("tokenizer.ggml.tokens", dark::testing::kGgufArray, GgufTestWriter::string_array_payload(tokens));
  w.kv_raw("tokenizer.ggml.merges", dark::testing::kGgufArray, GgufTestWriter::string_array_payload({}));
  w.kv<std::uint32_t>("tokenizer.ggml.eos_token_id", dark::testing::kGgufU32, 0);
  dark::testing::write_bytes(tmp / "bpe.gguf", w.build().bytes);
  const auto t = load_tokenizer("gguf", tmp / "bpe.gguf");
  EXPECT_NE(dynamic_cast<const BpeTokenizer*>(t.get()), nullptr);
  EXPECT_EQ(t->hash().rfind("gguf-bpe-", 0), 0u);
}

// ---- tokenizer.spm.json ----

TEST(SpmTokenizerFile, RoundTripsWithTheSameHashAndIds) {
  SpmVocab v = tiny_vocab();
  v.scores[kAB] = -3.1415927f;  // a score that is not a short decimal
  v.add_space_prefix = true;
  const SpmTokenizer t(v);
  const auto file = tokenizer_file(t);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->name, "tokenizer.spm.json");
  const auto back = tokenizer_from_file("gguf", file->bytes, "test");
  ASSERT_NE(dynamic_cast<const SpmTokenizer*>(back.get()), nullptr);
  EXPECT_EQ(back->hash(), t.hash());
  EXPECT_EQ(back->kind(), "gguf");
  for (const std::string s : {"abc ab  a", "WXYZ", "x\xFF" "ab", ""}) EXPECT_EQ(back->encode(s), t.encode(s)) << s;

  using nlohmann::json;
  auto damaged = [&](const std::function<void(json&)>& change) {
    json j = json::parse(file->bytes);
    change(j);
    return j.dump();
  };
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["scores"].erase(0); }), "t.json"); },
               {"t.json", "scores for"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["token_types"].erase(0); }), "t.json"); },
               {"t.json", "token_types", "entries for"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j.erase("eos_id"); }), "t.json"); },
               {"t.json", "eos_id", "missing"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["eos_id"] = 1e10; }), "t.json"); },
               {"t.json", "eos_id", "not a 32-bit integer"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["scores"][0] = "x"; }), "t.json"); },
               {"t.json", "score", "not a number"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["scores"][0] = 1e300; }), "t.json"); },
               {"t.json", "not a finite float"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["token_types"][0] = 9; }), "t.json"); },
               {"t.json", "type 9"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["add_space_prefix"] = 1; }), "t.json"); },
               {"t.json", "add_space_prefix", "wrong type"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["format_version"] = 2; }), "t.json"); },
               {"t.json", "format version 2"});
  expect_error([&] { tokenizer_from_file("gguf", damaged([](json& j) { j["format"] = "other"; }), "t.json"); },
               {"t.json", "darkformer-bpe-tokenizer", "darkformer-spm-tokenizer"});
  // "hf" tokenizers are byte-level BPE only.
  expect_error([&] { tokenizer_from_file("hf", file->bytes, "t.json"); }, {"t.json", "darkformer-bpe-tokenizer"});
}

TEST(SpmTokenizerFile, APreparedDataFolderReopensWithItsTokenizer) {
  TempDir tmp;
  const std::string model = SpmGguf().write(tmp, "tiny.gguf");
  for (int i = 0; i < 6; ++i) dark::testing::write_text(tmp / ("src/doc" + std::to_string(i) + ".txt"), "ab c  abc\naaa\n");
  DataConfig cfg;
  cfg.sources = {tmp / "src"};
  cfg.dir = tmp / "data";
  cfg.tokenizer = TokenizerKind::gguf;
  cfg.tokenizer_model = model;
  cfg.val_fraction = 0.2;
  const PreparedData data = prepare(cfg);
  ASSERT_NE(dynamic_cast<const SpmTokenizer*>(data.tokenizer.get()), nullptr);
  const PreparedData again = open_prepared(cfg.dir);
  ASSERT_NE(dynamic_cast<const SpmTokenizer*>(again.tokenizer.get()), nullptr);
  EXPECT_EQ(again.tokenizer->hash(), data.tokenizer->hash());
  EXPECT_EQ(again.meta["tokenizer"]["kind"], "gguf");
  const auto shard = again.open_shard(Split::train);
  Ids got(static_cast<std::size_t>(std::min<std::int64_t>(shard->size(), 9)));
  shard->read(0, static_cast<std::int64_t>(got.size()), got.data());
  // add_bos_token is absent, so true (llama.cpp's default): each document starts with bos.
  EXPECT_EQ(again.window_bos_id, data.tokenizer->bos_id());
  Ids want = {data.tokenizer->bos_id()};
  for (const std::int32_t id : data.tokenizer->encode("ab c  abc\naaa\n")) want.push_back(id);
  want.push_back(1);
  want.resize(got.size());
  EXPECT_EQ(got, want);
}

// ---- Gemma 3 270M ----

fs::path repo_root() { return fs::path(DARK_TEST_DATA_DIR).parent_path().parent_path(); }
fs::path gemma3_path() { return repo_root() / "cache/models/gemma3/gemma-3-270m-q4_k_m.gguf"; }

const SpmTokenizer& gemma3() {
  static const std::unique_ptr<SpmTokenizer> t = SpmTokenizer::from_gguf(gemma3_path().string());
  return *t;
}

#define SKIP_WITHOUT_GEMMA3()                \
  if (!fs::exists(gemma3_path()))            \
  GTEST_SKIP() << "no " << gemma3_path()     \
               << " (Gemma 3 270M; scripts/fetch-models.sh gemma3 fetches it)"

std::string unhex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

struct RefCase {
  std::string text;
  Ids ids;
  std::string detok;
};

std::vector<RefCase> gemma3_reference() {
  const fs::path ref = fs::path(DARK_TEST_DATA_DIR) / "gemma3_tokenizer.json";
  std::ifstream in(ref);
  EXPECT_TRUE(in) << "missing " << ref << " (make_gemma3_tokenizer_reference.py)";
  if (!in) return {};
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<RefCase> cases;
  for (const auto& c : doc.at("cases")) {
    RefCase r;
    r.text = c.contains("text") ? c["text"].get<std::string>() : unhex(c.at("text_hex").get<std::string>());
    r.ids = c.at("ids").get<Ids>();
    r.detok = c.contains("detok") ? c["detok"].get<std::string>() : unhex(c.at("detok_hex").get<std::string>());
    cases.push_back(std::move(r));
  }
  return cases;
}

std::string printable(const std::string& s) {
  const std::string cut = s.size() > 120 ? s.substr(0, 120) + "..." : s;
  return nlohmann::json(cut).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TEST(SpmTokenizerGemma3, Metadata) {
  SKIP_WITHOUT_GEMMA3();
  const SpmTokenizer& t = gemma3();
  EXPECT_EQ(t.vocab_size(), 262144);
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.unk_id(), 3);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_FALSE(t.add_space_prefix());
  EXPECT_EQ(t.piece(2), "<bos>");
  EXPECT_EQ(t.token_type(1), BpeTokenType::control);
  EXPECT_EQ(t.token_type(107), BpeTokenType::user_defined);  // "\n"
  EXPECT_EQ(t.piece(212), "</s>");
  EXPECT_EQ(t.token_type(212), BpeTokenType::control);  // user-defined in the file, control for llama.cpp
  EXPECT_EQ(t.token_type(238), BpeTokenType::byte);     // <0x00>
  const auto u = load_tokenizer("gguf", gemma3_path().string());
  EXPECT_EQ(u->hash(), t.hash());
  EXPECT_EQ(u->encode("Hello world"), (Ids{9259, 1902}));
}

TEST(SpmTokenizerGemma3, MatchesLlamaCppIdsAndDetokenize) {
  SKIP_WITHOUT_GEMMA3();
  const SpmTokenizer& t = gemma3();
  const std::vector<RefCase> cases = gemma3_reference();
  int matched = 0;
  for (const RefCase& c : cases) {
    const Ids got = t.tokenize(c.text, true);
    EXPECT_EQ(got, c.ids) << "text: " << printable(c.text)
                          << "\n(regenerate: cache/venv-ref/bin/python tests/reference/make_gemma3_tokenizer_reference.py)";
    EXPECT_EQ(t.encode(c.text), Ids(c.ids.begin() + 1, c.ids.end())) << "text: " << printable(c.text);
    EXPECT_EQ(t.decode(c.ids), c.detok) << "text: " << printable(c.text);
    matched += got == c.ids;
  }
  std::printf("gemma3: %d of %zu reference cases match llama.cpp\n", matched, cases.size());
  EXPECT_GE(cases.size(), 100u);
}

TEST(SpmTokenizerGemma3, SavedFileRebuildsTheSameTokenizer) {
  SKIP_WITHOUT_GEMMA3();
  const SpmTokenizer& t = gemma3();
  const auto file = tokenizer_file(t);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->name, "tokenizer.spm.json");
  const auto back = tokenizer_from_file("gguf", file->bytes, "gemma3 tokenizer.spm.json");
  EXPECT_EQ(back->hash(), t.hash());
  for (const RefCase& c : gemma3_reference()) EXPECT_EQ(back->encode(c.text), t.encode(c.text)) << printable(c.text);
}

// A megabyte of text, and one unbroken megabyte-long fragment, round-trip; the time is
// printed for information (speed is measured by benchmarks, not asserted here).
TEST(SpmTokenizerGemma3, EncodesMegabyteInputsAndDecodesThemBack) {
  SKIP_WITHOUT_GEMMA3();
  const SpmTokenizer& t = gemma3();
  std::mt19937 rng(3);
  const std::string words[] = {"the ",    "tokenizer ", "of ",     "a ",     "model\n", "Training, ", "12,345 ",
                               "data.\n", "    ",       "return x;", "café ", "日本語 ", "weights ",   "gradient ",
                               "is ",     "(loss) ",    "\n\n",    "\t",     "<div>",   "Pneumonoultramicroscopic "};
  std::string text;
  while (text.size() < (1u << 20)) text += words[rng() % std::size(words)];
  // One fragment of 1 MB: no newline, tab or space run, so nothing splits it.
  std::string line;
  while (line.size() < (1u << 20)) line += "word" + std::to_string(rng() % 1000) + (rng() % 2 ? " " : ",");
  for (const std::string* s : {&text, &line}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = t.encode(*s);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double mbps = static_cast<double>(s->size()) / 1e6 / secs;
    std::printf("encode: %.1f MB in %.3f s = %.2f MB/s, %zu tokens\n", s->size() / 1e6, secs, mbps, ids.size());
    EXPECT_EQ(t.decode(ids), *s);
  }
}

}  // namespace
}  // namespace dark::data
