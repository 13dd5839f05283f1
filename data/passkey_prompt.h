// Passkey-retrieval prompts in the format of Landmark Attention's test (epfml/landmark-attention,
// llama/run_test.py), sized in tokens of a given tokenizer. Five lines joined by "\n":
//   There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you about
//   the important information there. <filler before> The pass key is N. Remember it. N is the pass key. <filler after>
//   What is the pass key? The pass key is
// The filler is the sentences "The grass is green." "The sky is blue." "The sun is yellow."
// "Here we go." "There and back again." in that order, over and over, joined by spaces; the
// needle line stands after round(depth * S) of its S sentences and the filler after it goes on
// where the filler before stopped (depth 0: right after the task line; 1: right before the
// question). Landmark cuts its filler at a character count, often inside a word, and starts
// the filler after the needle from the beginning again; whole sentences keep the text natural
// next to the needle, at the price of hitting a requested length to within half a sentence
// (about 3 tokens) rather than one token.
//
// Every trial is a function of (seed, length, depth, trial) alone (Philox, core/philox.h): the
// same seed gives the same pass keys on every machine, and a grid's cell does not depend on
// which other lengths or depths the grid has.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace dark::data {

inline constexpr std::int32_t kPasskeyMax = 50000;  // pass keys are uniform in 1..kPasskeyMax

// The depths of a grid of n >= 1 points: i / (n - 1) for i = 0..n-1 (0, 0.25, 0.5, 0.75, 1 for
// n = 5); {0.5} for n = 1.
std::vector<double> passkey_depths(int n);

// The pass key of one trial: uniform in 1..kPasskeyMax, from Philox keyed by the seed, with the
// length, the depth (in millionths) and the trial in the counter. length < 2^24, trial < 2^20.
std::int32_t passkey_of(std::uint64_t seed, std::int64_t length, double depth, int trial);

// The prompt text with S filler sentences, `before` of them ahead of the needle, and key N.
std::string passkey_text(std::int64_t filler_sentences, std::int64_t before, std::int32_t key);

struct PasskeyPrompt {
  std::string text;               // the prompt (no bos)
  std::vector<std::int32_t> ids;  // bos when asked, then tokenizer.encode(text)
  std::int32_t key = 0;
  double depth = 0;                   // as asked
  std::int64_t filler_sentences = 0;  // S
  std::int64_t sentences_before = 0;  // round(depth * S)
  std::int64_t needle_token = 0;      // index in ids of the token holding the needle line's first character
  // The tokens of " N" after the prompt, as the tokenizer splits text + " " + N (empty when that
  // split does not begin with ids): the expected greedy answer, which scoring checks first.
  std::vector<std::int32_t> answer;
};

// The prompt of `length` tokens (bos included when `bos`), or as close as whole filler sentences
// allow (the shorter of two equally close), with the needle at `depth` in [0, 1] and pass key
// `key`. Throws when `length` is below the prompt without filler, naming both lengths.
PasskeyPrompt passkey_prompt(const Tokenizer& tokenizer, bool bos, std::int64_t length, double depth, std::int32_t key);

}  // namespace dark::data
