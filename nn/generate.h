// Sampling text from a causal LM: temperature, top-k, and a Philox stream per token so a
// (seed, prompt) pair always gives the same continuation. Decoding is incremental
// (CausalLM::decode: a key/value cache for softmax, the O(1) recurrent state for the
// random-feature kinds), and the whole prompt is always seen: a prompt longer than the
// context is an error, never cut.
//
// The context: GenerateOptions::context, or the model's own (CausalLM::decode_context: no
// limit when every layer's decoding state is bounded, model.max_seq_len otherwise). A model
// whose state is bounded never restarts. One that keeps a growing key/value cache restarts
// it on the last half of the context when prompt + generated tokens fill it (each token then
// costs O(context) attention work on average), and says so through on_notice.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/model.h"

namespace dark::nn {

struct GenerateOptions {
  int max_tokens = 64;
  double temperature = 0.8;  // 0 = greedy
  int top_k = 40;            // 0 = the whole vocabulary
  std::uint64_t seed = 0;
  // Longest window the model sees (>= 2); 0 = the model's own (CausalLM::decode_context).
  std::int64_t context = 0;
  std::int32_t stop_token = -1;  // stop after emitting this id (e.g. end of document); -1 = never
  // Optional: each step's row of next-token logits (float64), before its token is chosen.
  std::function<void(const std::vector<double>&)> on_logits;
  // Optional: a line for the user when the context fills and the cache restarts.
  std::function<void(const std::string&)> on_notice;
};

// The context `options` give `model`: options.context when > 0, else the model's (0 = no
// limit).
std::int64_t generation_context(CausalLM& model, const GenerateOptions& options);

// Returns only the new tokens. `on_token` (optional) sees each as it is produced. Throws when
// the prompt is empty or longer than the context (naming both numbers).
std::vector<std::int32_t> generate(CausalLM& model, const std::vector<std::int32_t>& prompt,
                                   const GenerateOptions& options,
                                   const std::function<void(std::int32_t)>& on_token = nullptr);

// Picks a token from one row of logits (exposed for tests).
std::int32_t sample_token(const std::vector<double>& logits, double temperature, int top_k, double uniform01);

}  // namespace dark::nn
