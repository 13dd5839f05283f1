// Sampling text from a causal LM: temperature, top-k, and a Philox stream per token so a
// (seed, prompt) pair always gives the same continuation. Decoding is incremental
// (CausalLM::decode: a key/value cache for softmax, the O(1) recurrent state for the
// random-feature kinds); the model sees at most the last `context` tokens: when the window
// is full, the cache restarts on its last half.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "nn/model.h"

namespace dark::nn {

struct GenerateOptions {
  int max_tokens = 64;
  double temperature = 0.8;  // 0 = greedy
  int top_k = 40;            // 0 = the whole vocabulary
  std::uint64_t seed = 0;
  std::int64_t context = 256;  // longest window the model sees (>= 2)
  std::int32_t stop_token = -1;  // stop after emitting this id (e.g. end of document); -1 = never
};

// Returns only the new tokens. `on_token` (optional) sees each as it is produced.
std::vector<std::int32_t> generate(CausalLM& model, const std::vector<std::int32_t>& prompt,
                                   const GenerateOptions& options,
                                   const std::function<void(std::int32_t)>& on_token = nullptr);

// Picks a token from one row of logits (exposed for tests).
std::int32_t sample_token(const std::vector<double>& logits, double temperature, int top_k, double uniform01);

}  // namespace dark::nn
