// Byte-level BPE tokenizer (data/bpe_tokenizer.h): a tiny hand-built vocabulary (merge order,
// leftmost ties, long pre-tokens against a naive reference BPE, byte pieces, special tokens,
// round trips of arbitrary bytes), pre-tokenizer splits written by hand from the GPT-2 regex,
// and the SmolLM2-135M-Instruct GGUF against ids from Hugging Face tokenizers (cross-checked
// with llama.cpp), made by tests/reference/make_bpe_reference.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"
#include "gguf_test_writer.h"
#include "test_util.h"

namespace dark::data {
namespace {

using Ids = std::vector<std::int32_t>;
using Pieces = std::vector<std::string>;
namespace fs = std::filesystem;

// ---- a tiny vocabulary ----
// 0 <|endoftext|> (eos, control), 1 <|im_start|> (bos, control), 2 <|im_end|> (control),
// 3 "<|im" (user-defined), 4..259 the 256 byte pieces in byte order, then merge results.
constexpr std::int32_t kByte0 = 4;
std::int32_t byte_id(unsigned char b) { return kByte0 + b; }

BpeVocab tiny_vocab(const std::vector<std::string>& merges, const std::string& pre = "gpt2") {
  BpeVocab v;
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im"};
  v.token_types = {3, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(BpeTokenizer::byte_encode(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(1);
  }
  for (const auto& m : merges) {
    const auto sp = m.find(' ');
    const std::string joined = m.substr(0, sp) + m.substr(sp + 1);
    bool present = false;
    for (const auto& t : v.tokens) present = present || t == joined;
    if (!present) {
      v.tokens.push_back(joined);
      v.token_types.push_back(1);
    }
  }
  v.merges = merges;
  v.eos_id = 0;
  v.bos_id = 1;
  v.unk_id = -1;
  v.pre = pre;
  return v;
}

Pieces pieces_of(const BpeTokenizer& t, const Ids& ids) {
  Pieces out;
  for (const auto id : ids) out.push_back(t.piece(id));
  return out;
}

Pieces split(std::string_view text, const std::string& pre) {
  Pieces out;
  for (const auto p : BpeTokenizer::pre_tokenize(text, pre)) out.emplace_back(p);
  return out;
}

TEST(BpeTokenizer, ByteToUnicodeTableIsGpt2s) {
  EXPECT_EQ(BpeTokenizer::byte_to_unicode('A'), U'A');
  EXPECT_EQ(BpeTokenizer::byte_to_unicode(' '), U'\u0120');   // Ġ
  EXPECT_EQ(BpeTokenizer::byte_to_unicode('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(BpeTokenizer::byte_to_unicode(0), U'\u0100');
  EXPECT_EQ(BpeTokenizer::byte_to_unicode(0x7F), U'\u0121');
  EXPECT_EQ(BpeTokenizer::byte_to_unicode(0xAD), U'\u0143');
  EXPECT_EQ(BpeTokenizer::byte_to_unicode(0xE9), U'\u00E9');
  EXPECT_EQ(BpeTokenizer::byte_encode(" hi\n"), "Ġhi\xC4\x8A");
}

TEST(BpeTokenizer, MergesApplyInRankOrder) {
  // "l o" outranks "l l", so "hello" is h e l lo -> he l lo -> hel lo, never "ll".
  const BpeTokenizer t(tiny_vocab({"l o", "h e", "he l", "l l"}));
  EXPECT_EQ(pieces_of(t, t.encode("hello")), (Pieces{"hel", "lo"}));
  // With "l l" first: h e ll o -> he ll o; "he l" never sees a lone l.
  const BpeTokenizer u(tiny_vocab({"l l", "h e", "he l", "l o"}));
  EXPECT_EQ(pieces_of(u, u.encode("hello")), (Pieces{"he", "ll", "o"}));
  // Equal ranks: the leftmost pair merges first.
  const BpeTokenizer a(tiny_vocab({"a a"}));
  EXPECT_EQ(pieces_of(a, a.encode("aaa")), (Pieces{"aa", "a"}));
  EXPECT_EQ(pieces_of(a, a.encode("aaaaa")), (Pieces{"aa", "aa", "a"}));
  // A merge across pre-tokens never happens: " w" and "hello" are separate pieces.
  const BpeTokenizer w(tiny_vocab({"o Ġ", "Ġ w"}));
  EXPECT_EQ(pieces_of(w, w.encode("o wo")), (Pieces{"o", "Ġw", "o"}));
}

// Naive BPE: repeatedly merge the leftmost lowest-rank adjacent pair.
Pieces naive_bpe(const std::string& word, const std::vector<std::string>& merges) {
  std::map<std::pair<std::string, std::string>, int> rank;
  for (int r = 0; r < static_cast<int>(merges.size()); ++r) {
    const auto sp = merges[r].find(' ');
    rank.emplace(std::make_pair(merges[r].substr(0, sp), merges[r].substr(sp + 1)), r);
  }
  Pieces s;
  for (const char c : word) s.emplace_back(1, c);
  for (;;) {
    int best = INT_MAX;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      const auto it = rank.find({s[i], s[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == INT_MAX) return s;
    s[at] += s[at + 1];
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
}

TEST(BpeTokenizer, ShortAndLongPreTokensMatchNaiveBpe) {
  // Merges over {a, b, c} (all letters, so a word is one pre-token), random words of 1..300
  // letters: the array path (<= 64 bytes) and the heap path (longer) against naive_bpe.
  const std::vector<std::string> merges = {"a b", "b a", "ab a", "c c", "a a", "ab ab", "cc a", "b b",
                                           "aa b", "ba ba", "abab ab", "cc cc", "b c", "bc a"};
  const BpeTokenizer t(tiny_vocab(merges));
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    std::string word;
    for (int i = 0; i < n; ++i) word.push_back("aabbc"[rng() % 5]);
    ASSERT_EQ(pieces_of(t, t.encode(word)), naive_bpe(word, merges)) << word;
  }
  const BpeTokenizer a(tiny_vocab({"a a", "aa aa"}));
  EXPECT_EQ(a.encode(std::string(200, 'a')).size(), 50u);
  EXPECT_EQ(pieces_of(a, a.encode(std::string(201, 'a'))).back(), "a");
}

TEST(BpeTokenizer, EveryByteHasItsPieceAndArbitraryBytesRoundTrip) {
  const BpeTokenizer t(tiny_vocab({"h e", "Ġ w"}));
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(t.decode(t.encode(all)), all);
  // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an overlong encoding,
  // a surrogate): byte pieces, exact round trip.
  const std::string bad = "a\x80z\xE6\x97 \xC0\xAF\xED\xA0\x80\xFF";
  const Ids ids = t.encode(bad);
  EXPECT_EQ(t.decode(ids), bad);
  EXPECT_EQ(ids[0], byte_id('a'));
  EXPECT_EQ(ids[1], byte_id(0x80));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 100, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 256);
    ASSERT_EQ(t.decode(t.encode(s)), s);
  }
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.decode(Ids{}), "");
}

TEST(BpeTokenizer, SpecialTokensAreMatchedLiterallyLongestFirst) {
  const BpeTokenizer t(tiny_vocab({"H i"}));
  const Ids user = {byte_id('u'), byte_id('s'), byte_id('e'), byte_id('r')};
  Ids want = {1};
  want.insert(want.end(), user.begin(), user.end());
  want.push_back(byte_id('\n'));
  want.push_back(t.token_id("Hi"));
  want.push_back(2);
  EXPECT_EQ(t.encode("<|im_start|>user\nHi<|im_end|>"), want);
  // "<|im" (user-defined) loses to the longer "<|im_start|>" but matches on its own.
  EXPECT_EQ(t.encode("<|im_"), (Ids{3, byte_id('_')}));
  EXPECT_EQ(t.encode("<|i"), (Ids{byte_id('<'), byte_id('|'), byte_id('i')}));
  // Text around a special token is pre-tokenized on its own: the space before it stays a
  // piece by itself (the lookahead \s+(?!\S) sees the end of the piece).
  EXPECT_EQ(t.encode("a <|endoftext|>"), (Ids{byte_id('a'), byte_id(' '), 0}));
  // bos/eos decode to nothing, other control and user-defined tokens to their text.
  EXPECT_EQ(t.decode(Ids{1, byte_id('x'), 2, 3, 0}), "x<|im_end|><|im");
  EXPECT_EQ(t.piece(1), "<|im_start|>");
  EXPECT_EQ(t.piece(byte_id(' ')), "Ġ");
  EXPECT_EQ(t.token_type(2), BpeTokenType::control);
  EXPECT_EQ(t.token_type(3), BpeTokenType::user_defined);
}

TEST(BpeTokenizer, Gpt2PreTokenizerSplits) {
  const std::string g = "gpt2";
  EXPECT_EQ(split("Hello world", g), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("I'm here, they'll go", g), (Pieces{"I", "'m", " here", ",", " they", "'ll", " go"}));
  EXPECT_EQ(split("we've re're 'd'", g), (Pieces{"we", "'ve", " re", "'re", " '", "d", "'"}));
  EXPECT_EQ(split("don'T", g), (Pieces{"don", "'", "T"}));
  EXPECT_EQ(split("!!'s", g), (Pieces{"!!'", "s"}));
  EXPECT_EQ(split("hello  world", g), (Pieces{"hello", " ", " world"}));
  EXPECT_EQ(split("a\n\nb", g), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("end   ", g), (Pieces{"end", "   "}));
  EXPECT_EQ(split("  lead", g), (Pieces{" ", " lead"}));
  EXPECT_EQ(split(" ", g), (Pieces{" "}));
  EXPECT_EQ(split("  \n", g), (Pieces{"  \n"}));
  EXPECT_EQ(split("\tif x:\n\t\treturn", g), (Pieces{"\t", "if", " x", ":", "\n\t", "\t", "return"}));
  EXPECT_EQ(split("x = 12345;", g), (Pieces{"x", " =", " 12345", ";"}));
  EXPECT_EQ(split("3.14", g), (Pieces{"3", ".", "14"}));
  EXPECT_EQ(split("a1b", g), (Pieces{"a", "1", "b"}));
  EXPECT_EQ(split(" ?! ", g), (Pieces{" ?!", " "}));
  EXPECT_EQ(split("café 日本語 😀!", g), (Pieces{"café", " 日本語", " 😀!"}));
  // U+00A0 and U+3000 are White_Space; U+00B2 (superscript two) is \p{N}.
  EXPECT_EQ(split("a\u00A0b", g), (Pieces{"a", "\u00A0", "b"}));
  EXPECT_EQ(split("a\u3000\u3000b", g), (Pieces{"a", "\u3000", "\u3000", "b"}));
  EXPECT_EQ(split("x\u00B2", g), (Pieces{"x", "\u00B2"}));
  // Invalid bytes are "other" code points: they join punctuation runs, not letters.
  EXPECT_EQ(split("a\xFF\xFE" "b", g), (Pieces{"a", "\xFF\xFE", "b"}));
  EXPECT_EQ(split(" \xFF!", g), (Pieces{" \xFF!"}));
  EXPECT_EQ(split("", g), Pieces{});
}

TEST(BpeTokenizer, SmollmPreTokenizerIsolatesEveryDigitFirst) {
  const std::string s = "smollm";
  EXPECT_EQ(split("x = 12345;", s), (Pieces{"x", " =", " ", "1", "2", "3", "4", "5", ";"}));
  EXPECT_EQ(split("3.14", s), (Pieces{"3", ".", "1", "4"}));
  EXPECT_EQ(split("a 1", s), (Pieces{"a", " ", "1"}));
  EXPECT_EQ(split("a  1", s), (Pieces{"a", "  ", "1"}));  // the lookahead stops at the digit
  EXPECT_EQ(split("abc123 def", s), (Pieces{"abc", "1", "2", "3", " def"}));
  EXPECT_EQ(split("x\u00B2\u00BD", s), (Pieces{"x", "\u00B2", "\u00BD"}));
  EXPECT_EQ(split("Hello world", s), (Pieces{"Hello", " world"}));
}

TEST(BpeTokenizer, RejectsBadData) {
  dark::testing::expect_error([] { BpeTokenizer t(tiny_vocab({}, "llama3")); }, {"unsupported pre-tokenizer 'llama3'", "\"smollm\", \"gpt2\""});
  dark::testing::expect_error([] { BpeTokenizer t(tiny_vocab({"x yz"})); }, {"merge 0 'x yz'"});
  BpeVocab v = tiny_vocab({"a b"});
  v.merges.push_back("nospace");
  dark::testing::expect_error([&] { BpeTokenizer t(v); }, {"merge 1 'nospace'"});
  v = tiny_vocab({});
  v.eos_id = 100000;
  dark::testing::expect_error([&] { BpeTokenizer t(v); }, {"eos id 100000"});

  const BpeTokenizer t(tiny_vocab({}));
  EXPECT_THROW(t.decode(Ids{-1}), Error);
  EXPECT_THROW(t.decode(Ids{t.vocab_size()}), Error);
  EXPECT_THROW(t.piece(t.vocab_size()), Error);
}

TEST(BpeTokenizer, BytesWithoutAPieceAreDroppedBeforeMerging) {
  // Without a piece for 'q' (as SmolLM2 lacks 0x04, 0xFF, ...): the byte is dropped before
  // merging, so the pieces around it merge (HF tokenizers with unk_token null).
  BpeVocab v = tiny_vocab({"a b"});
  const std::int32_t q = byte_id('q');
  v.tokens.erase(v.tokens.begin() + q);
  v.token_types.erase(v.token_types.begin() + q);
  const BpeTokenizer t(v);
  EXPECT_EQ(t.missing_bytes(), (std::vector<unsigned char>{'q'}));
  EXPECT_EQ(pieces_of(t, t.encode("ab aqb q")), (Pieces{"ab", "Ġ", "ab", "Ġ"}));
  EXPECT_EQ(t.encode("q"), Ids{});
  EXPECT_EQ(t.encode(std::string(100, 'q') + "ab"), (Ids{t.token_id("ab")}));  // the long path too
  EXPECT_EQ(t.encode(std::string(40, 'q') + "a" + std::string(40, 'q') + "b"), (Ids{t.token_id("ab")}));
  EXPECT_EQ(t.decode(t.encode("aqb")), "ab");
  EXPECT_TRUE(BpeTokenizer(tiny_vocab({})).missing_bytes().empty());
}

TEST(BpeTokenizer, HashIsStableAndCoversMerges) {
  const BpeTokenizer a(tiny_vocab({"a b", "c d"})), b(tiny_vocab({"a b", "c d"}));
  const BpeTokenizer c(tiny_vocab({"c d", "a b"})), d(tiny_vocab({"a b", "c d"}, "smollm"));
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_NE(a.hash(), d.hash());
  EXPECT_EQ(a.hash().rfind("gguf-bpe-", 0), 0u);
  EXPECT_LE(a.hash().size(), 63u);
  EXPECT_EQ(a.kind(), "gguf");
}

// ---- SmolLM2-135M-Instruct ----

fs::path repo_root() { return fs::path(DARK_TEST_DATA_DIR).parent_path().parent_path(); }
fs::path smollm2_path() { return repo_root() / "cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"; }

const BpeTokenizer& smollm2() {
  static const std::unique_ptr<BpeTokenizer> t = BpeTokenizer::from_gguf(smollm2_path().string());
  return *t;
}

#define SKIP_WITHOUT_MODEL()                                                                         \
  if (!fs::exists(smollm2_path()))                                                                   \
  GTEST_SKIP() << "no " << smollm2_path() << " (the default pretrained model; fetch it to run this test)"

TEST(BpeTokenizerSmolLM2, MetadataAndSpecialIds) {
  SKIP_WITHOUT_MODEL();
  const BpeTokenizer& t = smollm2();
  EXPECT_EQ(t.vocab_size(), 49152);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_EQ(t.pad_id(), 2);
  EXPECT_EQ(t.pre(), "smollm");
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.piece(0), "<|endoftext|>");
  EXPECT_EQ(t.piece(1), "<|im_start|>");
  EXPECT_EQ(t.piece(2), "<|im_end|>");
  EXPECT_EQ(t.token_type(16), BpeTokenType::control);
  EXPECT_EQ(t.token_type(17), BpeTokenType::normal);
  // load_tokenizer("gguf", path) builds the same tokenizer.
  const auto u = load_tokenizer("gguf", smollm2_path().string());
  EXPECT_EQ(u->kind(), "gguf");
  EXPECT_EQ(u->hash(), t.hash());
  EXPECT_EQ(u->encode("Hello world"), (Ids{19556, 905}));
}

TEST(BpeTokenizerSmolLM2, MatchesHuggingFaceIdsAndRoundTrips) {
  SKIP_WITHOUT_MODEL();
  const BpeTokenizer& t = smollm2();
  const fs::path ref = fs::path(DARK_TEST_DATA_DIR) / "bpe_smollm2.json";
  std::ifstream in(ref);
  ASSERT_TRUE(in) << "missing " << ref << " (python3 tests/reference/make_bpe_reference.py)";
  const nlohmann::json doc = nlohmann::json::parse(in);
  const std::string bos = t.piece(t.bos_id()), eos = t.piece(t.eos_id());
  EXPECT_EQ(std::vector<int>(t.missing_bytes().begin(), t.missing_bytes().end()),
            doc.at("missing_bytes").get<std::vector<int>>());
  int checked = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const Ids want = c.at("ids").get<Ids>();
    const Ids got = t.encode(text);
    EXPECT_EQ(got, want) << "text: " << nlohmann::json(text).dump()
                         << "\n(regenerate: python3 tests/reference/make_bpe_reference.py)";
    // decode drops bos/eos and encode the bytes without a piece: compare with those removed.
    std::string expect = text;
    for (const std::string& drop : {bos, eos})
      for (std::size_t p; (p = expect.find(drop)) != std::string::npos;) expect.erase(p, drop.size());
    std::erase_if(expect, [&](char ch) {
      const auto& m = t.missing_bytes();
      return std::find(m.begin(), m.end(), static_cast<unsigned char>(ch)) != m.end();
    });
    EXPECT_EQ(t.decode(got), expect) << "text: " << nlohmann::json(text).dump();
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

TEST(BpeTokenizerSmolLM2, EncodesFasterThanOneMegabytePerSecond) {
  SKIP_WITHOUT_MODEL();
  const BpeTokenizer& t = smollm2();
  std::string text;
  std::mt19937 rng(3);
  const std::string words[] = {"the ",     "tokenizer ", "of ",  "a ",       "model\n", "Training, ",
                               "12,345 ",  "data.\n",    "    ", "return x;", "café ",  "日本語 ",
                               "weights ", "gradient ",  "is ",  "(loss) ", "and ", "Pneumonoultramicroscopic "};
  while (text.size() < (4u << 20)) text += words[rng() % std::size(words)];
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = t.encode(text);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mbps = static_cast<double>(text.size()) / 1e6 / secs;
  std::printf("encode: %.1f MB in %.3f s = %.2f MB/s, %zu tokens\n", text.size() / 1e6, secs, mbps, ids.size());
  EXPECT_EQ(t.decode(ids), text);
  // Generous bound (shared 2-core CI machines); typical is several MB/s.
  EXPECT_GT(mbps, 0.5);
}

// A GGUF file holding the tiny vocabulary's tokenizer metadata, with eos_token_id and
// one token type given as u64 values.
std::string tiny_gguf(std::uint64_t eos_id, std::uint64_t first_type) {
  const BpeVocab v = tiny_vocab({"a b"});
  dark::testing::GgufTestWriter w;
  w.kv_string("tokenizer.ggml.model", "gpt2");
  w.kv_string("tokenizer.ggml.pre", "gpt2");
  w.kv_raw("tokenizer.ggml.tokens", dark::testing::kGgufArray,
           dark::testing::GgufTestWriter::string_array_payload(v.tokens));
  w.kv_raw("tokenizer.ggml.merges", dark::testing::kGgufArray,
           dark::testing::GgufTestWriter::string_array_payload(v.merges));
  std::vector<std::uint64_t> types(v.token_types.begin(), v.token_types.end());
  types[0] = first_type;
  w.kv_raw("tokenizer.ggml.token_type", dark::testing::kGgufArray,
           dark::testing::GgufTestWriter::array_payload<std::uint64_t>(dark::testing::kGgufU64, types));
  w.kv<std::uint64_t>("tokenizer.ggml.eos_token_id", dark::testing::kGgufU64, eos_id);
  w.kv<std::uint32_t>("tokenizer.ggml.padding_token_id", dark::testing::kGgufU32, UINT32_MAX);  // none
  return w.build().bytes;
}

// Found while fuzzing from_gguf: ids and token types were cut to int32, so an eos_token_id of
// 2^32 (or a token type of 2^32 + 3) became 0 (3) and loaded as a valid tokenizer.
TEST(BpeTokenizer, FromGgufRejectsIdsThatDoNotFitInt32) {
  dark::testing::TempDir tmp;
  const std::string good = tmp / "good.gguf", big_id = tmp / "big_id.gguf", big_type = tmp / "big_type.gguf";
  dark::testing::write_bytes(good, tiny_gguf(0, 3));
  dark::testing::write_bytes(big_id, tiny_gguf(std::uint64_t{1} << 32, 3));
  dark::testing::write_bytes(big_type, tiny_gguf(0, (std::uint64_t{1} << 32) + 3));
  const auto t = BpeTokenizer::from_gguf(good);
  EXPECT_EQ(t->eos_id(), 0);
  EXPECT_EQ(t->pad_id(), -1);
  EXPECT_EQ(t->token_type(0), BpeTokenType::control);
  dark::testing::expect_error([&] { BpeTokenizer::from_gguf(big_id); },
                              {"big_id.gguf", "tokenizer.ggml.eos_token_id is 4294967296, not a token id"});
  dark::testing::expect_error([&] { BpeTokenizer::from_gguf(big_type); },
                              {"big_type.gguf", "tokenizer.ggml.token_type[0] is 4294967299, not a token type"});
}

TEST(BpeTokenizer, FromGgufNamesAMissingFile) {
  dark::testing::expect_error([] { BpeTokenizer::from_gguf("/nonexistent/model.gguf"); }, {"/nonexistent/model.gguf"});
}

}  // namespace
}  // namespace dark::data
