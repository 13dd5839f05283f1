// Passkey retrieval (prompts: data/passkey_prompt.h) scored on a model: accuracy by length and
// by depth, each with its 95% Wilson interval (train/wilson_interval.h).
//
// A trial is correct when the first number in the model's greedy continuation (at most
// `new_tokens` tokens, ending early at eos; Landmark's test generates 10) equals the pass key,
// leading zeros aside. It is computed with greedy decoding's own result, but cheaply:
//   1. one forward of the prompt followed by the expected answer " N" (teacher forcing) gives the
//      greedy token at each answer position: greedy decoding follows the answer as long as
//      those argmaxes equal it, and the first that does not (or the one after the answer) is
//      its next token. Only those rows get logits (CausalLM::final_hidden + head_logits):
//      never (T, vocab) for the whole prompt (Gemma 3's vocabulary is 262k).
//   2. judge_passkey_answer decides from the greedy tokens known so far whenever their text
//      already fixes the first number (a digit run ended by another character, or one that no
//      further digits can turn into N), which is the usual case.
//   3. otherwise (no digit yet, or the digits so far begin N and may go on) greedy decoding
//      goes on token by token with the incremental decoder (CausalLM::decode_hidden, a
//      key/value cache or the random-feature state), the logits of one row per step, until the
//      number is decided or `new_tokens` are out.
// The result equals nn::generate at temperature 0 with eos as the stop token (tested).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/passkey_prompt.h"
#include "nn/model.h"

namespace dark::train {

struct PasskeyOptions {
  // Prompt lengths in tokens.
  std::vector<std::int64_t> lengths = {512, 1024, 2048, 4096};
  int depths = 5;          // grid points (data::passkey_depths)
  int trials = 2;          // per (length, depth)
  std::uint64_t seed = 0;  // the pass keys (data::passkey_of)
  bool bos = false;        // prompts start with bos (the model's rule)
  int new_tokens = 10;     // the greedy continuation's length
};

// What a greedy continuation says about pass key `key`: decided once its first number is fixed
// (or `complete`: the continuation has ended); `number` is that first digit run as far as the
// text goes ("" when none): " 3" already settles that the answer is not 12548.
struct PasskeyVerdict {
  bool decided = false;
  bool correct = false;
  std::string number;
};
PasskeyVerdict judge_passkey_answer(std::string_view text, std::int32_t key, bool complete);

struct PasskeyAnswer {
  std::vector<std::int32_t> tokens;  // the greedy tokens, as far as they were needed to decide
  std::string text;                  // their text (passkey.json's "answer")
  PasskeyVerdict verdict;            // decided
  bool decoded = false;              // step 3 was needed
};
// The greedy answer of `model` (eval mode inside) to one prompt.
PasskeyAnswer passkey_answer(nn::CausalLM& model, const data::Tokenizer& tokenizer, const data::PasskeyPrompt& prompt,
                             int new_tokens);

struct PasskeyTrial {
  std::int64_t length = 0;  // asked
  std::int64_t tokens = 0;  // the prompt's own length
  double depth = 0;
  int trial = 0;
  std::int32_t key = 0;
  std::int64_t needle_token = 0;
  PasskeyAnswer answer;
  double seconds = 0;
};

struct PasskeyReport {
  PasskeyOptions options;
  std::vector<PasskeyTrial> trials;  // by length, then depth, then trial
  double seconds = 0;
  // passkey.json: the options, overall accuracy, by length, by depth, every (length, depth)
  // cell (each accuracy with correct, trials and its Wilson interval) and every trial.
  nlohmann::json to_json() const;
  // What a metrics.jsonl line carries: {"accuracy", "by_length": {"512": ...}, "by_depth": {"0.25": ...}}.
  nlohmann::json metrics() const;
  // The tables people read: length x depth (correct/trials [interval]), by length (with the
  // prompts' actual lengths and the time per prompt), by depth.
  std::string table() const;
};

// Runs every trial of the grid, logging a line per length (accuracy so far, time per prompt, ETA).
PasskeyReport run_passkey(nn::CausalLM& model, const data::Tokenizer& tokenizer, const PasskeyOptions& options);

}  // namespace dark::train
