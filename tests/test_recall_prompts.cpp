// The recall tasks' prompts and their judges, without a model: passkey prompts
// (data/passkey_prompt.h) against an independent writing of Landmark's format, their length in
// tokens (the byte tokenizer, and SmolLM2's and Gemma 3's GGUF tokenizers when
// scripts/fetch-models.sh has fetched them), the needle's place, the keys' range and
// determinism; the copy task's lists and token bookkeeping (data/copy_prompt.h) against naive
// string computations; the greedy answer's judge (train/passkey_eval.h); the Wilson interval
// against published values; the config keys' errors; the commands' integer lists.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "data/common_words.h"
#include "data/copy_prompt.h"
#include "data/passkey_prompt.h"
#include "data/sentencepiece_tokenizer.h"
#include "test_util.h"
#include "train/cli/args.h"
#include "train/config.h"
#include "train/passkey_eval.h"
#include "train/wilson_interval.h"

namespace dark::data::recall_prompt_tests {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTask =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you "
    "about the important information there.";
const std::vector<std::string> kSentences = {"The grass is green.", "The sky is blue.", "The sun is yellow.",
                                             "Here we go.", "There and back again."};

// Landmark's format, written again: the task, `before` sentences of the repeated filler, the
// needle, the filler's next `total - before` sentences, the question; lines joined by "\n".
std::string landmark_text(int total, int before, int key) {
  const auto filler = [](int from, int to) {
    std::string s;
    for (int i = from; i < to; ++i) s += (i > from ? " " : "") + kSentences[i % 5];
    return s;
  };
  const std::string n = std::to_string(key);
  return kTask + "\n" + filler(0, before) + "\nThe pass key is " + n + ". Remember it. " + n + " is the pass key.\n" +
         filler(before, total) + "\nWhat is the pass key? The pass key is";
}

// The released models' GGUF tokenizers that are here (scripts/fetch-models.sh), with their bos rule.
std::vector<std::pair<std::string, std::shared_ptr<Tokenizer>>> gguf_tokenizers() {
  std::vector<std::pair<std::string, std::shared_ptr<Tokenizer>>> out;
  const fs::path models = fs::path(DARK_TEST_DATA_DIR) / "../../cache/models";
  for (const char* file : {"smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3/gemma-3-270m-q4_k_m.gguf"})
    if (fs::exists(models / file)) out.emplace_back(file, load_gguf_tokenizer((models / file).string()));
  return out;
}

TEST(PasskeyPrompt, ExactTextForAFixedSeedAndLength) {
  const ByteTokenizer bytes;  // one token per byte: the length is the text's
  const std::int32_t key = passkey_of(0, 400, 0.5, 0);
  EXPECT_EQ(key, 12548);  // Philox4x32-10 (seed 0, stream "passkey"): pins the keys across machines and versions
  const PasskeyPrompt p = passkey_prompt(bytes, false, 400, 0.5, key);
  EXPECT_EQ(
      p.text,
      "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you "
      "about the important information there.\n"
      "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
      "The pass key is 12548. Remember it. 12548 is the pass key.\n"
      "The grass is green. The sky is blue. The sun is yellow. Here we go.\n"
      "What is the pass key? The pass key is");
  EXPECT_EQ(p.text, landmark_text(9, 5, 12548));
  EXPECT_EQ(p.ids.size(), 403u);  // 9 sentences: 403 bytes; 8 would give 383
  EXPECT_EQ(p.filler_sentences, 9);
  EXPECT_EQ(p.sentences_before, 5);  // round(0.5 x 9)
  EXPECT_EQ(p.answer, bytes.encode(" 12548"));
  // bos counts in the length and comes first.
  const PasskeyPrompt with_bos = passkey_prompt(bytes, true, 400, 0.5, key);
  EXPECT_EQ(with_bos.ids.front(), ByteTokenizer::kBos);
  EXPECT_EQ(with_bos.text, p.text);
  EXPECT_EQ(with_bos.needle_token, p.needle_token + 1);
  dark::testing::expect_error([&] { passkey_prompt(bytes, false, 200, 0.5, key); },
                              {"200 tokens is too short", "takes 247"});
}

TEST(PasskeyPrompt, TheNeedleStandsAtItsDepth) {
  const ByteTokenizer bytes;
  for (const double depth : passkey_depths(5)) {
    const PasskeyPrompt p = passkey_prompt(bytes, false, 2000, depth, 777);
    EXPECT_EQ(p.sentences_before, std::llround(depth * static_cast<double>(p.filler_sentences)));
    EXPECT_EQ(p.text, landmark_text(static_cast<int>(p.filler_sentences), static_cast<int>(p.sentences_before), 777));
    // One byte per token: the needle's first token is where its text starts.
    EXPECT_EQ(p.needle_token, static_cast<std::int64_t>(p.text.find("The pass key is 777")));
    // The share of the filler's bytes ahead of the needle: the depth, to within a sentence.
    const auto bare = static_cast<double>(passkey_text(0, 0, 777).size());
    const double ahead = static_cast<double>(p.needle_token) - static_cast<double>(kTask.size() + 2);
    EXPECT_NEAR(ahead / (static_cast<double>(p.ids.size()) - bare), depth, 0.02) << "needle at " << p.needle_token;
  }
  EXPECT_NE(passkey_prompt(bytes, false, 600, 0.0, 5).text.find("there.\n\nThe pass key is 5."), std::string::npos);
  EXPECT_NE(passkey_prompt(bytes, false, 600, 1.0, 5).text.find("is the pass key.\n\nWhat is the pass key?"),
            std::string::npos);
  EXPECT_EQ(passkey_depths(5), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(passkey_depths(1), (std::vector<double>{0.5}));
}

TEST(PasskeyPrompt, LengthInTokensOfTheReleasedModelsTokenizers) {
  const auto tokenizers = gguf_tokenizers();
  if (tokenizers.empty()) GTEST_SKIP() << "no GGUF model in cache/models; run scripts/fetch-models.sh all";
  for (const auto& [name, tokenizer] : tokenizers) {
    const bool bos = tokenizer->add_bos();
    for (const std::int64_t length : {512, 1024, 4096, 8192})
      for (const double depth : {0.0, 0.5, 1.0}) {
        const PasskeyPrompt p = passkey_prompt(*tokenizer, bos, length, depth, passkey_of(1, length, depth, 0));
        const auto tokens = static_cast<std::int64_t>(p.ids.size());
        EXPECT_LE(std::abs(tokens - length), 4) << name << " length " << length << " depth " << depth;
        // No other number of sentences comes closer.
        for (const std::int64_t s : {p.filler_sentences - 1, p.filler_sentences + 1}) {
          const std::string other = passkey_text(s, std::llround(depth * static_cast<double>(s)), p.key);
          const auto other_tokens = static_cast<std::int64_t>(tokenizer->encode(other).size()) + (bos ? 1 : 0);
          EXPECT_GE(std::abs(other_tokens - length), std::abs(tokens - length)) << name << " S " << s;
        }
        EXPECT_EQ(tokenizer->decode(p.answer), " " + std::to_string(p.key)) << name;
        EXPECT_EQ(tokenizer->decode(
                      std::vector<std::int32_t>(p.ids.begin() + p.needle_token, p.ids.begin() + p.needle_token + 4)),
                  "The pass key is")
            << name;
      }
  }
}

TEST(PasskeyPrompt, KeysAreUniformInRangeAndDeterministic) {
  std::vector<int> bins(10, 0);
  double sum = 0;
  int n = 0;
  for (const std::int64_t length : {512, 1024, 2048, 4096})
    for (const double depth : passkey_depths(5))
      for (int trial = 0; trial < 500; ++trial) {
        const std::int32_t key = passkey_of(0, length, depth, trial);
        ASSERT_GE(key, 1);
        ASSERT_LE(key, kPasskeyMax);
        EXPECT_EQ(key, passkey_of(0, length, depth, trial));
        ++bins[static_cast<std::size_t>((key - 1) / 5000)];
        sum += key, ++n;
      }
  // 10000 keys: the mean is within 4 standard errors (50000 / sqrt(12 n) = 144) of 25000.5,
  // each tenth of the range holds 1000 +- 4 x 30 of them.
  EXPECT_NEAR(sum / n, 25000.5, 4 * 144.4);
  for (const int b : bins) EXPECT_NEAR(b, 1000, 120);
  EXPECT_NE(passkey_of(0, 512, 0.5, 0), passkey_of(1, 512, 0.5, 0));
  EXPECT_EQ((std::vector<std::int32_t>{passkey_of(0, 1024, 0.25, 0), passkey_of(0, 1024, 0.25, 1),
                                       passkey_of(0, 1024, 0.25, 2), passkey_of(0, 1024, 0.25, 3)}),
            (std::vector<std::int32_t>{10949, 15537, 9475, 16203}));
}

TEST(PasskeyJudge, TheFirstNumberOfTheGreedyContinuation) {
  using train::judge_passkey_answer;
  const auto check = [](const char* text, bool complete, bool decided, bool correct, const char* number) {
    const train::PasskeyVerdict v = judge_passkey_answer(text, 12548, complete);
    EXPECT_EQ(v.decided, decided) << "'" << text << "' complete " << complete;
    EXPECT_EQ(v.correct, correct) << "'" << text << "'";
    EXPECT_EQ(v.number, number) << "'" << text << "'";
  };
  check(" 12548.", false, true, true, "12548");
  check(" 12548", false, false, false, "12548");  // a digit may follow
  check(" 12548", true, true, true, "12548");     // the continuation ended (eos, or its last token)
  check(" 125", false, false, false, "125");      // may still become 12548
  check(" 13", false, true, false, "13");         // can never become 12548
  check(" 125489", false, true, false, "125489");
  check(" 012548 is", false, true, true, "012548");  // leading zeros aside, as int() reads it
  check(" the", false, false, false, "");
  check(" the", true, true, false, "");
  check(" the key 12548, yes", false, true, true, "12548");
  check(" 4 or 12548", false, true, false, "4");  // only the first number counts
}

TEST(WilsonInterval, PublishedValues) {
  // The closed forms at the ends (0/n: [0, z^2 / (n + z^2)]; n/n: [n / (n + z^2), 1]) and two
  // worked by hand from (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), z = 1.959964.
  const auto expect = [](std::int64_t k, std::int64_t n, double low, double high) {
    const train::ProportionInterval ci = train::wilson_interval(k, n);
    EXPECT_NEAR(ci.low, low, 5e-5) << k << "/" << n;
    EXPECT_NEAR(ci.high, high, 5e-5) << k << "/" << n;
  };
  expect(0, 10, 0.0, 0.27753);
  expect(5, 10, 0.23659, 0.76341);
  expect(10, 10, 0.72247, 1.0);
  expect(1, 1, 0.20654, 1.0);
  expect(8, 40, 0.10500, 0.34757);
  EXPECT_TRUE(std::isnan(train::wilson_interval(0, 0).low));
}

TEST(CopyPrompt, ListsAreSeededDistinctWordsOfTheList) {
  const auto& pool = common_words();
  const std::set<std::string_view> in_pool(pool.begin(), pool.end());
  EXPECT_EQ(in_pool.size(), kCommonWordCount);  // no word twice in the list itself
  for (const std::string_view w : pool) {
    ASSERT_GE(w.size(), 3u);
    ASSERT_LE(w.size(), 10u);
    ASSERT_EQ(w.find_first_not_of("abcdefghijklmnopqrstuvwxyz"), std::string_view::npos) << w;
  }
  const std::vector<std::string> a = copy_words(0, 3000, 0);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 3000u);
  for (const std::string& w : a) EXPECT_TRUE(in_pool.contains(w)) << w;
  EXPECT_EQ(a, copy_words(0, 3000, 0));
  EXPECT_NE(copy_words(0, 8, 0), copy_words(0, 8, 1));
  EXPECT_NE(copy_words(0, 8, 0), copy_words(1, 8, 0));
  EXPECT_EQ(copy_words(0, 8, 0),
            (std::vector<std::string>{"spot", "secondary", "resulted", "outdoor", "affect", "chase", "red", "woman"}));
  EXPECT_EQ(copy_words(0, kCommonWordCount, 2).size(), kCommonWordCount);  // every word once
  dark::testing::expect_error([] { copy_words(0, kCommonWordCount + 1, 0); }, {"2 to 4096 words", "4097"});
}

TEST(CopyPrompt, TokensAndDistancesAgainstNaiveCounts) {
  const ByteTokenizer bytes;
  const std::vector<std::string> words = {"red", "apple", "go", "winter"};
  EXPECT_EQ(copy_text(words), "Here is a list of words: red apple go winter\nThe same list again: red apple go winter");
  for (const bool bos : {false, true}) {
    const CopyPrompt p = copy_prompt(bytes, bos, words);
    ASSERT_EQ(p.spans.size(), words.size());
    // With one token per byte a word's tokens are its space and its letters: the text's words by
    // splitting at spaces and newlines, the header's 6 and the line's 4 left out.
    std::vector<std::size_t> starts;
    for (std::size_t c = 0; c < p.text.size(); ++c)
      if (p.text[c] != ' ' && p.text[c] != '\n' && (c == 0 || p.text[c - 1] == ' ' || p.text[c - 1] == '\n'))
        starts.push_back(c);
    ASSERT_EQ(starts.size(), 6 + words.size() + 4 + words.size());
    for (std::size_t i = 0; i < words.size(); ++i) {
      const std::size_t first = starts[6 + i] - 1, repeat = starts[6 + words.size() + 4 + i] - 1;
      EXPECT_EQ(p.spans[i].first_begin, static_cast<std::int64_t>(first + bos)) << words[i];
      EXPECT_EQ(p.spans[i].first_end - p.spans[i].first_begin, static_cast<std::int64_t>(words[i].size() + 1));
      EXPECT_EQ(p.spans[i].repeat_begin, static_cast<std::int64_t>(repeat + bos)) << words[i];
      EXPECT_EQ(p.spans[i].distance(),
                static_cast<std::int64_t>(std::string(" red apple go winter\nThe same list again:").size()));
    }
  }
  // A SentencePiece tokenizer trained here (as the quickstart's, which decodes a lone "▁word"
  // without its space) with a small vocabulary, which splits most words into several pieces;
  // and the released tokenizers. Each word's tokens decode to " word" in both places, and the
  // distance is the token count of what lies between, counted by encoding the prefixes.
  std::vector<std::pair<std::string, std::shared_ptr<Tokenizer>>> tokenizers = gguf_tokenizers();
  {
    std::vector<std::string> lines;
    for (std::size_t i = 0; i + 8 <= kCommonWordCount; i += 8) {
      std::string line;
      for (std::size_t j = i; j < i + 8; ++j) line += (j > i ? " " : "") + std::string(common_words()[j]);
      lines.push_back(line);
    }
    SentencePieceOptions options;
    options.vocab_size = 400;
    options.character_coverage = 1.0;
    tokenizers.emplace_back("sentencepiece 400", SentencePieceTokenizer::train(lines, options));
  }
  for (const auto& [name, tokenizer] : tokenizers) {
    const std::vector<std::string> list = copy_words(5, 40, 0);
    const bool bos = tokenizer->add_bos();
    const CopyPrompt p = copy_prompt(*tokenizer, bos, list);
    std::int64_t tokens = 0;
    for (const CopyWord& w : p.spans) tokens += w.repeat_end - w.repeat_begin;
    std::printf("%s: %.2f tokens a word\n", name.c_str(),
                static_cast<double>(tokens) / static_cast<double>(list.size()));
    const auto count = [&](const std::string& text) {
      return static_cast<std::int64_t>(tokenizer->encode(text).size()) + bos;
    };
    std::string list_text = "Here is a list of words:", repeat_text;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const CopyWord& w = p.spans[i];
      const auto piece = [&](std::int64_t b, std::int64_t e) {
        return tokenizer->decode(std::vector<std::int32_t>(p.ids.begin() + b, p.ids.begin() + e));
      };
      EXPECT_EQ(piece(w.first_begin, w.first_end), " " + list[i]) << name;
      EXPECT_EQ(piece(w.repeat_begin, w.repeat_end), " " + list[i]) << name;
      EXPECT_EQ(w.first_begin, count(list_text)) << name << " word " << i;
      list_text += " " + list[i];
    }
    repeat_text = list_text + "\nThe same list again:";
    for (std::size_t i = 0; i < list.size(); ++i) {
      EXPECT_EQ(p.spans[i].repeat_begin, count(repeat_text)) << name << " word " << i;
      repeat_text += " " + list[i];
    }
  }
}

// A tokenizer whose tokens do not decode one by one to the text.
class MergingTokenizer final : public Tokenizer {
 public:
  std::string kind() const override { return "test"; }
  std::vector<std::int32_t> encode(std::string_view text) const override { return bytes_.encode(text); }
  std::string decode(std::span<const std::int32_t> ids) const override {
    return ids.size() == 1 ? std::string("?") : bytes_.decode(ids);
  }
  std::int32_t vocab_size() const override { return bytes_.vocab_size(); }
  std::int32_t eos_id() const override { return bytes_.eos_id(); }
  std::int32_t bos_id() const override { return bytes_.bos_id(); }
  std::string hash() const override { return "merging-test"; }
  std::string piece(std::int32_t id) const override { return bytes_.piece(id); }

 private:
  ByteTokenizer bytes_;
};

TEST(CopyPrompt, ATokenizerThatHidesTheWordsIsAnError) {
  dark::testing::expect_error(
      [] {
        copy_prompt(MergingTokenizer(), false, {"red", "apple"});
      },
      {"do not decode token by token", "merging-test"});
  dark::testing::expect_error([] { copy_prompt(ByteTokenizer(), false, {"red apple"}); },
                              {"'red apple'", "holds a space"});
}

json tiny_doc(const json& evaluation) {
  return {{"data", {{"tokenizer", "byte"}, {"seq_len", 32}}},
          {"training", {{"steps", 5}}},
          {"schedule", {{"warmup_steps", 0}}},
          {"evaluation", evaluation}};
}

TEST(RecallConfig, KeysAndTheirErrors) {
  const train::RunConfig defaults = train::parse_config(tiny_doc(json::object()));
  EXPECT_EQ(defaults.evaluation.passkey.trials, 0);  // off unless asked for
  EXPECT_EQ(defaults.evaluation.copy.trials, 0);
  EXPECT_EQ(defaults.evaluation.passkey.lengths, (std::vector<std::int64_t>{512, 1024, 2048, 4096}));
  const train::RunConfig set =
      train::parse_config(tiny_doc({{"passkey", {{"lengths", {300, 600}}, {"depths", 3}, {"trials", 4}, {"seed", 9}}},
                                    {"copy", {{"words", {8}}, {"trials", 2}}}}));
  EXPECT_EQ(set.evaluation.passkey.lengths, (std::vector<std::int64_t>{300, 600}));
  EXPECT_EQ(set.evaluation.passkey.depths, 3);
  EXPECT_EQ(set.evaluation.passkey.seed, 9u);
  EXPECT_EQ(set.evaluation.copy.words, (std::vector<std::int64_t>{8}));
  EXPECT_EQ(train::to_json(set)["evaluation"]["passkey"]["lengths"], json({300, 600}));
  const auto error = [](const json& evaluation) {
    return dark::testing::error_of([&] { train::parse_config(tiny_doc(evaluation)); });
  };
  EXPECT_EQ(error({{"passkey", {{"lengths", json::array()}}}}),
            "config: evaluation.passkey.lengths: expected a non-empty list of integers, got []");
  EXPECT_EQ(error({{"passkey", {{"lengths", {512, 512}}}}}),
            "config: evaluation.passkey.lengths[1]: 512 is listed twice");
  EXPECT_EQ(error({{"passkey", {{"lengths", {0}}}}}),
            "config: evaluation.passkey.lengths[0]: expected a positive integer, got 0");
  EXPECT_EQ(error({{"passkey", {{"lengths", "512"}}}}),
            "config: evaluation.passkey.lengths: expected a non-empty list of integers, got \"512\"");
  EXPECT_EQ(error({{"passkey", {{"trials", -1}}}}),
            "config: evaluation.passkey.trials: expected a non-negative integer, got -1");
  EXPECT_EQ(error({{"passkey", {{"trials", 1 << 20}}}}), "config: evaluation.passkey.trials: 1048576 exceeds 1048575");
  EXPECT_EQ(error({{"passkey", {{"depths", 0}}}}),
            "config: evaluation.passkey.depths: expected a positive integer, got 0");
  EXPECT_EQ(error({{"copy", {{"words", {4097}}}}}),
            "config: evaluation.copy.words[0]: expected an integer >= 2 <= 4096, got 4097");
  EXPECT_EQ(error({{"passkey", {{"length", {512}}}}}),
            "config: evaluation.passkey.length: unknown key (did you mean evaluation.passkey.lengths?)");
  EXPECT_EQ(error({{"recall", 1}}), "config: evaluation.recall: unknown key (evaluation has: ablation, passkey, copy)");
  // The commands' lists.
  const std::vector<cli::FlagSpec> specs = {{"--lengths", "LIST", "512,1024", ""}};
  EXPECT_EQ(cli::Args({}, specs).integers("--lengths", 1), (std::vector<long long>{512, 1024}));
  EXPECT_EQ(cli::Args({"--lengths", "7"}, specs).integers("--lengths", 1), (std::vector<long long>{7}));
  EXPECT_EQ(dark::testing::error_of([&] {
              cli::Args({"--lengths", "512,x"}, specs).integers("--lengths", 1);
            }),
            "--lengths: expected integers separated by commas, got '512,x'");
  EXPECT_EQ(dark::testing::error_of([&] {
              cli::Args({"--lengths", "512,,1"}, specs).integers("--lengths", 1);
            }),
            "--lengths: expected integers separated by commas, got '512,,1'");
  EXPECT_EQ(dark::testing::error_of([&] {
              cli::Args({"--lengths", "0"}, specs).integers("--lengths", 1, 10);
            }),
            "--lengths: 0 is out of range: expected integers in [1, 10]");
}

}  // namespace
}  // namespace dark::data::recall_prompt_tests
