// The copy task (prompts: data/copy_prompt.h) scored on a model by teacher forcing: on the
// repeat of the list, each word token's next-token loss and whether it is the argmax, and the
// share of words all of whose tokens are, by the distance back to the word's first occurrence
// (in tokens; the list length sets it) and by list length. Word shares come with their 95%
// Wilson interval (train/wilson_interval.h).
//
// One forward per prompt (CausalLM::final_hidden); the logits of the repeat's rows only, a
// chunk of rows at a time (CausalLM::head_logits): never (T, vocab) at once.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/copy_prompt.h"
#include "nn/model.h"

namespace dark::train {

struct CopyOptions {
  // List lengths in words: with SmolLM2's and Gemma 3's tokenizers about one token a word (" word"),
  // so distances of about 38, 134, 520, 2070 and 4130 tokens (one per bucket 32-63, ...,
  // 4096-8191), prompts up to about 8.3K tokens.
  std::vector<std::int64_t> words = {32, 128, 512, 2048, 4096};
  int trials = 1;          // lists per length
  std::uint64_t seed = 0;  // the lists (data::copy_words)
  bool bos = false;        // prompts start with bos (the model's rule)
};

// One scored token of a repeat.
struct CopyToken {
  std::int64_t distance = 0;  // its word's distance back (data::CopyWord::distance)
  double loss = 0;            // -log p(token | everything before), nats
  bool correct = false;       // it is the argmax (lowest id on ties)
};

struct CopyScore {
  std::vector<CopyToken> tokens;   // the repeat's word tokens, in order
  std::vector<bool> words_copied;  // per word: every one of its repeat tokens is the argmax
  std::vector<std::int64_t> word_distance;
};
// Scores one prompt (eval mode inside).
CopyScore score_copy(nn::CausalLM& model, const data::CopyPrompt& prompt);

struct CopyTrial {
  std::int64_t words = 0;
  int trial = 0;
  std::int64_t tokens = 0;  // the prompt's length
  CopyScore score;
  double seconds = 0;
};

struct CopyReport {
  CopyOptions options;
  std::vector<CopyTrial> trials;  // by list length, then trial
  double seconds = 0;
  // copy.json: the options; overall, by list length and by distance bucket (32-63, 64-127, ...
  // tokens): tokens, mean loss, token accuracy, words copied with their Wilson interval;
  // per trial its lengths and results.
  nlohmann::json to_json() const;
  // What a metrics.jsonl line carries: overall word and token accuracy and loss, and by list length.
  nlohmann::json metrics() const;
  std::string table() const;
};

// Runs every list, logging a line per list length (results so far, time per prompt, ETA).
CopyReport run_copy(nn::CausalLM& model, const data::Tokenizer& tokenizer, const CopyOptions& options);

// The distance bucket of a distance in tokens: "0-31", "32-63", ..., "4096-8191", and so on up.
std::string copy_distance_bucket(std::int64_t distance);

}  // namespace dark::train
