// Tokenizers: byte-level round trips; SentencePiece BPE trained on a small generated text
// (round trips, determinism, save / load, special ids); the tokenizer-training line sampler.
#include <gtest/gtest.h>

#include <chrono>

#include "core/error.h"
#include "core/file_io.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace dark::data {
namespace {

using dark::testing::generated_text;
using dark::testing::TempDir;
using dark::testing::write_text;

std::vector<std::string> lines_of(const std::string& text) {
  LineSampler s(1 << 30, 0);
  s.add_text(text);
  return s.lines();
}

SentencePieceOptions small_options() {
  SentencePieceOptions o;
  o.vocab_size = 320;
  o.character_coverage = 1.0;
  return o;
}

TEST(DataTokenizer, ByteRoundTripsAnyBytes) {
  ByteTokenizer t;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));  // includes invalid UTF-8
  const auto ids = t.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(t.decode(ids), all);
  EXPECT_EQ(t.vocab_size(), 258);
  EXPECT_EQ(t.eos_id(), 256);
  EXPECT_EQ(t.bos_id(), 257);
  EXPECT_EQ(t.decode(std::vector<std::int32_t>{'h', 'i', 256, 257, '!'}), "hi!");
  EXPECT_EQ(t.piece(256), "<eos>");
  EXPECT_EQ(t.piece('a'), "a");
  EXPECT_EQ(t.piece('\n'), "<0x0A>");
  EXPECT_EQ(t.hash(), "byte-v1");
  EXPECT_THROW(t.decode(std::vector<std::int32_t>{258}), Error);
  EXPECT_THROW(t.decode(std::vector<std::int32_t>{-1}), Error);
}

TEST(DataTokenizer, LineSamplerKeepsAllOrADeterministicSample) {
  const std::string text = "a\n\nb\nc\n\n\nd";
  LineSampler all(10, 0);
  all.add_text(text);
  EXPECT_EQ(all.lines(), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(all.lines_seen(), 4);

  std::string many;
  for (int i = 0; i < 1000; ++i) many += "line" + std::to_string(i) + "\n";
  LineSampler a(100, 7), b(100, 7), c(100, 8);
  a.add_text(many);
  b.add_text(many);
  c.add_text(many);
  EXPECT_EQ(a.lines().size(), 100u);
  EXPECT_EQ(a.lines(), b.lines());
  EXPECT_NE(a.lines(), c.lines());
  // A uniform sample reaches past the first 100 lines.
  int late = 0;
  for (const auto& l : a.lines()) late += std::stoi(l.substr(4)) >= 500;
  EXPECT_GT(late, 25);
  EXPECT_LT(late, 75);
}

TEST(DataTokenizer, SentencePieceTrainsRoundTripsAndIsDeterministic) {
  const std::string text = generated_text(3000, 1);
  const auto lines = lines_of(text);
  const auto t0 = std::chrono::steady_clock::now();
  const auto a = SentencePieceTokenizer::train(lines, small_options());
  const auto b = SentencePieceTokenizer::train(lines, small_options());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 8.0);

  EXPECT_EQ(a->model_bytes(), b->model_bytes()) << "SentencePiece training is not deterministic";
  EXPECT_EQ(a->hash(), b->hash());
  EXPECT_TRUE(a->hash().starts_with("sentencepiece-"));
  EXPECT_EQ(a->vocab_size(), 320);
  EXPECT_EQ(a->eos_id(), 2);
  EXPECT_EQ(a->bos_id(), 1);
  EXPECT_EQ(a->piece(2), "</s>");

  // Exact round trips, whitespace and newlines included, and merges make it shorter than bytes.
  const std::string sample = text.substr(0, 2000);
  const auto ids = a->encode(sample);
  EXPECT_EQ(a->decode(ids), sample);
  EXPECT_LT(ids.size(), sample.size() / 2);
  for (const std::string s : {"  two  spaces\n\n\ttab\n", "digits 12345", "unseen ÅÖ 日本 😀 chars\n", ""})
    EXPECT_EQ(a->decode(a->encode(s)), s) << s;
  // Byte fallback: a character never seen in training becomes its UTF-8 bytes.
  const auto emoji = a->encode("😀");
  EXPECT_EQ(emoji.size(), 4u);
  EXPECT_EQ(a->piece(emoji[0]), "<0xF0>");
  // Invalid UTF-8 is normalised to U+FFFD by SentencePiece (the corpus reader rejects it before).
  EXPECT_EQ(a->decode(a->encode("a\xFF" "b")), "a\xEF\xBF\xBD" "b");
  // eos separates documents and decodes to nothing.
  std::vector<std::int32_t> joined = a->encode("ka to");
  joined.push_back(a->eos_id());
  EXPECT_EQ(a->decode(joined), "ka to");
  EXPECT_THROW(a->decode(std::vector<std::int32_t>{320}), Error);
}

// Found by tests/fuzz/fuzz_encode: a "▁" (U+2581, SentencePiece's whitespace symbol) in the
// text decoded as a space. It is now written as its byte pieces and round-trips, next to
// spaces and inside words; text without it encodes as before.
TEST(DataTokenizer, SentencePieceRoundTripsItsWhitespaceSymbol) {
  const auto t = SentencePieceTokenizer::train(lines_of(generated_text(1500, 3)), small_options());
  for (const std::string s : {"\xE2\x96\x81", "a \xE2\x96\x81 b", "x\xE2\x96\x81\xE2\x96\x81y ", " \xE2\x96\x81the\n"})
    EXPECT_EQ(t->decode(t->encode(s)), s) << s;
  const auto ids = t->encode("\xE2\x96\x81");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(t->piece(ids[0]), "<0xE2>");
  EXPECT_EQ(t->piece(ids[1]), "<0x96>");
  EXPECT_EQ(t->piece(ids[2]), "<0x81>");
  // Around it, the text encodes as the parts would alone.
  std::vector<std::int32_t> parts = t->encode("the ring");
  parts.insert(parts.end(), ids.begin(), ids.end());
  const auto tail = t->encode(" to");
  parts.insert(parts.end(), tail.begin(), tail.end());
  EXPECT_EQ(t->encode("the ring\xE2\x96\x81 to"), parts);
}

// Found by tests/fuzz/fuzz_sentencepiece_load: a model proto whose second piece is the
// empty string made SentencePiece's trie builder throw Darts::Details::Exception, which
// escaped from_model_bytes; it is now the usual "not a SentencePiece model" error.
TEST(DataTokenizer, SentencePieceModelWithAnEmptyPieceIsAnError) {
  const unsigned char bytes[] = {0x0a, 0x0e, 0x0a, 0x05, 0x3c, 0x75, 0x6e, 0x6b, 0x3e, 0x15, 0x00, 0x00, 0x00,
                                 0x00, 0x18, 0x02, 0x0a, 0x0c, 0x0a, 0x03, 0x00, 0x68, 0x68, 0x68, 0x60, 0x60,
                                 0x68, 0xd0, 0x6e, 0x74, 0x69, 0x6a, 0x79, 0x12, 0x00, 0x18, 0x00, 0x20, 0x00};
  const std::string e = dark::testing::error_of([&] {
    SentencePieceTokenizer::from_model_bytes(std::string(reinterpret_cast<const char*>(bytes), sizeof bytes), "fuzzed");
  });
  EXPECT_EQ(e.rfind("sentencepiece tokenizer: fuzzed is not a SentencePiece model: ", 0), 0u) << e;
}

TEST(DataTokenizer, SentencePieceSavesAndLoads) {
  TempDir tmp;
  const auto a = SentencePieceTokenizer::train(lines_of(generated_text(1500, 2)), small_options());
  a->save(tmp / "tok.model");
  const auto b = load_tokenizer("sentencepiece", tmp / "tok.model");
  EXPECT_EQ(b->hash(), a->hash());
  EXPECT_EQ(b->vocab_size(), a->vocab_size());
  const std::string s = "the ka ring\n    to\n";
  EXPECT_EQ(b->encode(s), a->encode(s));
  EXPECT_EQ(load_tokenizer("byte", "")->hash(), "byte-v1");
}

TEST(DataTokenizer, SentencePieceErrorsAreClear) {
  TempDir tmp;
  write_text(tmp / "junk.model", "this is not a model");
  try {
    SentencePieceTokenizer::load(tmp / "junk.model");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("junk.model"), std::string::npos) << e.what();
  }
  try {
    SentencePieceTokenizer::load(tmp / "missing.model");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.model"), std::string::npos) << e.what();
  }
  // A vocabulary larger than the text supports.
  auto big = small_options();
  big.vocab_size = 5000;
  try {
    SentencePieceTokenizer::train(lines_of("tiny text\nonly\n"), big);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size 5000"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_tokenizer("wordpiece", ""), Error);
}

}  // namespace
}  // namespace dark::data
