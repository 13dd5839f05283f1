// Sampling (see generate.h).
#include "nn/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/philox.h"

namespace dark::nn {

std::int32_t sample_token(const std::vector<double>& logits, double temperature, int top_k, double u) {
  DARK_CHECK(!logits.empty(), "sample_token: empty logits");
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Highest logit first; ties broken by id so the order is deterministic.
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  if (temperature <= 0.0) return order[0];
  const std::size_t k = top_k > 0 ? std::min<std::size_t>(top_k, order.size()) : order.size();
  std::vector<double> weights(k);
  for (std::size_t i = 0; i < k; ++i) weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  double threshold = u * total;
  for (std::size_t i = 0; i < k; ++i) {
    threshold -= weights[i];
    if (threshold < 0) return order[i];
  }
  return order[k - 1];
}

std::int64_t generation_context(CausalLM& model, const GenerateOptions& options) {
  DARK_CHECK(options.context >= 0, "generate: context must be >= 0 (0 = the model's), got ", options.context);
  return options.context > 0 ? options.context : model.decode_context();
}

std::vector<std::int32_t> generate(CausalLM& model, const std::vector<std::int32_t>& prompt,
                                   const GenerateOptions& options, const std::function<void(std::int32_t)>& on_token) {
  DARK_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  const std::int64_t context = generation_context(model, options);  // 0 = no limit
  DARK_CHECK(context == 0 || context >= 2, "generate: context must be >= 2, got ", context);
  DARK_CHECK(context == 0 || static_cast<std::int64_t>(prompt.size()) <= context, "generate: the prompt has ",
             prompt.size(), " tokens, more than the context of ", context);
  // Only a growing key/value cache restarts; a bounded state (random features, sliding
  // windows) decodes on, whatever the context says.
  const bool restarts = context > 0 && model.decode_context() > 0;
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.train(false);
  std::vector<std::int32_t> tokens = prompt, produced;
  const std::int64_t vocab = model.config().vocab_size;
  const Device device = model.device();  // ids go where the model is; one row of logits comes back per token
  DecodeCache cache;
  std::vector<std::int32_t> pending = prompt;  // tokens the cache has not seen yet
  for (int i = 0; i < options.max_tokens; ++i) {
    if (restarts && cache.position + static_cast<std::int64_t>(pending.size()) > context) {
      // The cache restarts on the last half of the context, so each token costs O(context)
      // attention work on average.
      const std::size_t keep = static_cast<std::size_t>(context / 2);
      if (options.on_notice)
        options.on_notice(str("generate: the context of ", context, " tokens is full (", prompt.size(), " prompt + ",
                              produced.size(), " generated); continuing on the last ", keep, " tokens"));
      cache = DecodeCache{};
      pending.assign(tokens.end() - static_cast<std::ptrdiff_t>(keep), tokens.end());
    }
    const auto T = static_cast<std::int64_t>(pending.size());
    const Tensor last = model.decode_last(Tensor::from_vector(pending, {1, T}, device), cache);
    pending.clear();
    const std::vector<double> row = core::reshape(last, {vocab}).to(DType::f64).to_vector<double>();
    if (options.on_logits) options.on_logits(row);
    const philox::Block b = philox::block(options.seed, /*stream=*/0x67656e, static_cast<std::uint64_t>(i));
    const std::int32_t next = sample_token(row, options.temperature, options.top_k, philox::uniform01(b.v[0]));
    tokens.push_back(next);
    produced.push_back(next);
    pending.push_back(next);
    if (on_token) on_token(next);
    if (next == options.stop_token) break;
  }
  model.train(was_training);
  return produced;
}

}  // namespace dark::nn
