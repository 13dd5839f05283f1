// Generation: greedy and top-k choices, the temperature-scaled distribution, determinism; the
// context (from the layers' decoding states: unlimited when all are bounded, model.max_seq_len
// otherwise); the whole prompt is read (a longer one is an error, never cut); a bounded-state
// model never restarts (its logits are forward()'s on the whole sequence, far past any
// window); a growing cache restarts on the last half of the context; and a model trained at
// seq_len 16 reads a prompt of ~100 tokens to its first token.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/factory.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/generate.h"
#include "test_util.h"
#include "train/cli/loaded_run.h"
#include "train/trainer.h"
#include "train_test_util.h"

// A namespace of its own: darkformer_tests is a unity build (tests/CMakeLists.txt).
namespace dark::nn::generate_test {
namespace {

using dark::testing::expect_error;

TEST(Generate, SampleTokenFollowsTheTemperatureScaledDistribution) {
  const std::vector<double> logits = {1.0, 3.0, 2.0, -1.0};
  EXPECT_EQ(sample_token(logits, 0.0, 0, 0.99), 1);  // greedy
  EXPECT_EQ(sample_token(logits, 1.0, 1, 0.99), 1);  // top-1 is greedy
  // With temperature 2 the probabilities are softmax(logits / 2); sweep u over [0, 1).
  std::vector<double> p(4);
  double z = 0;
  for (int i = 0; i < 4; ++i) z += p[i] = std::exp(logits[i] / 2.0);
  std::vector<int> count(4, 0);
  const int n = 100000;
  for (int k = 0; k < n; ++k) ++count[sample_token(logits, 2.0, 0, (k + 0.5) / n)];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(count[i] / double(n), p[i] / z, 1e-4) << i;
  // top-k = 2 keeps only tokens 1 and 2.
  std::vector<int> top2(4, 0);
  for (int k = 0; k < 1000; ++k) ++top2[sample_token(logits, 1.0, 2, (k + 0.5) / 1000)];
  EXPECT_EQ(top2[0] + top2[3], 0);
  EXPECT_NEAR(top2[1] / 1000.0, std::exp(1.0) / (std::exp(1.0) + 1.0), 2e-3);
}

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 50, c.d_model = 16, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 32;
  c.init_std = 0.5;
  c.max_seq_len = 64;
  return c;
}

TEST(Generate, SameSeedSameTokens) {
  CausalLM model(small_config(), attention::make_factory({}));
  GenerateOptions g;
  g.max_tokens = 12;
  g.seed = 3;
  const auto a = generate(model, {1, 2, 3}, g);
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a, generate(model, {1, 2, 3}, g));
  g.seed = 4;
  EXPECT_NE(a, generate(model, {1, 2, 3}, g));
  g.stop_token = a[0];
  g.seed = 3;
  EXPECT_EQ(generate(model, {1, 2, 3}, g).size(), 1u);  // stops after emitting the stop token
  EXPECT_THROW(generate(model, {}, g), Error);
}

attention::AttentionConfig performer(int exact_window = 0) {
  attention::AttentionConfig a;
  a.kind = attention::Kind::performer;
  a.num_features = 16;
  a.chunk_size = 8;
  a.exact_window = exact_window;
  return a;
}

// Gemma 3's layout: layer 0 local (a sliding window of 8 keys), layer 1 global.
ModelConfig gemma_config() {
  ModelConfig c = small_config();
  c.family = ModelFamily::gemma3;
  c.mlp = MlpKind::geglu_tanh;
  c.n_layers = 2;
  c.sliding_window = 8;
  c.sliding_window_pattern = 2;
  return c;
}

TEST(Generate, TheContextComesFromTheLayersDecodingStates) {
  ModelConfig c = small_config();
  c.max_seq_len = 40;
  EXPECT_EQ(CausalLM(c, attention::make_factory({})).decode_context(), 40);  // softmax: a growing cache
  EXPECT_EQ(CausalLM(c, attention::make_factory(performer())).decode_context(), 0);  // recurrent state
  EXPECT_EQ(CausalLM(c, attention::make_factory(performer(4))).decode_context(), 0);  // state + W keys
  attention::AttentionConfig exact = performer();
  exact.mode = attention::Mode::exact;
  EXPECT_EQ(CausalLM(c, attention::make_factory(exact)).decode_context(), 40);  // exact: every key

  ModelConfig gemma = gemma_config();
  gemma.max_seq_len = 40;
  EXPECT_EQ(CausalLM(gemma, attention::make_factory({})).decode_context(), 40);  // the global layer grows
  EXPECT_EQ(CausalLM(gemma, attention::make_factory(performer())).decode_context(), 0);
  gemma.n_layers = 1;  // its only layer is local: a window of 8 keys
  EXPECT_EQ(CausalLM(gemma, attention::make_factory({})).decode_context(), 0);
  EXPECT_EQ(CausalLM(gemma, attention::make_factory(exact)).decode_context(), 0);

  c.max_seq_len = 0;
  CausalLM unknown(c, attention::make_factory({}));
  expect_error([&] { unknown.decode_context(); }, {"layer 0 (softmax)", "growing", "model.max_seq_len is 0"});
  EXPECT_EQ(CausalLM(c, attention::make_factory(performer())).decode_context(), 0);
}

std::vector<std::int32_t> ids_of_length(std::size_t n, std::int32_t vocab, std::int32_t salt = 0) {
  std::vector<std::int32_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>((7 * i + 3 + salt) % vocab);
  return ids;
}

// forward() on `ids` (the whole sequence, no cache): its last row of logits.
std::vector<double> last_logits(CausalLM& model, const std::vector<std::int32_t>& ids) {
  NoGradGuard no_grad;
  const auto T = static_cast<std::int64_t>(ids.size());
  const Tensor logits = model.forward(Tensor::from_vector(ids, {1, T}));
  const std::int64_t V = logits.size(2);
  return core::slice(core::reshape(logits, {T, V}), 0, T - 1, T).to(DType::f64).to_vector<double>();
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Greedy generation of `steps` tokens after `prompt`, recording each step's logits and notices.
struct Recorded {
  std::vector<std::int32_t> tokens;
  std::vector<std::vector<double>> logits;
  std::vector<std::string> notices;
};
Recorded record(CausalLM& model, const std::vector<std::int32_t>& prompt, int steps, std::int64_t context) {
  Recorded r;
  GenerateOptions g;
  g.max_tokens = steps;
  g.temperature = 0;
  g.context = context;
  g.on_logits = [&](const std::vector<double>& row) { r.logits.push_back(row); };
  g.on_notice = [&](const std::string& line) { r.notices.push_back(line); };
  r.tokens = generate(model, prompt, g);
  return r;
}

// A random-feature model (exact window of 4 keys; Gemma's layout: a local layer of 8 keys and
// a global one) decoding 60 tokens after a prompt of 30, with its own context (unlimited) and
// with a context of 16 (which only bounds the prompt): every step's logits are those of
// forward() on the whole sequence so far: nothing was restarted or forgotten.
TEST(Generate, ABoundedStateNeverRestarts) {
  for (const bool gemma : {false, true}) {
    ModelConfig c = gemma ? gemma_config() : small_config();
    c.n_layers = 2;
    c.max_seq_len = 16;
    CausalLM model(c, attention::make_factory(performer(/*exact_window=*/4)));
    model.train(false);
    const std::vector<std::int32_t> prompt = ids_of_length(30, c.vocab_size);
    for (const std::int64_t context : {0, 30}) {
      const Recorded r = record(model, prompt, 60, context);
      ASSERT_EQ(r.tokens.size(), 60u);
      EXPECT_TRUE(r.notices.empty()) << r.notices.front();
      std::vector<std::int32_t> seen = prompt;
      double worst = 0;
      for (std::size_t i = 0; i < r.tokens.size(); ++i) {
        worst = std::max(worst, max_abs_diff(r.logits[i], last_logits(model, seen)));
        seen.push_back(r.tokens[i]);
      }
      // float32 rounding of logits of size ~1 through the chunked and the recurrent forms.
      EXPECT_LT(worst, 2e-4) << (gemma ? "gemma3" : "llama") << ", context " << context;
    }
  }
}

// Softmax keeps every key: when prompt + output fill the context of 16, the cache restarts on
// the last 8 tokens (said through on_notice), and the logits are then forward()'s on the
// window the cache holds. A prompt longer than the context is an error naming both numbers.
TEST(Generate, AGrowingCacheRestartsOnTheLastHalfOfTheContext) {
  ModelConfig c = small_config();
  c.n_layers = 2;
  c.max_seq_len = 16;
  CausalLM model(c, attention::make_factory({}));
  model.train(false);
  const std::vector<std::int32_t> prompt = ids_of_length(10, c.vocab_size);
  const Recorded r = record(model, prompt, 20, 0);  // the model's context: 16
  std::vector<std::int32_t> tokens = prompt;
  std::size_t start = 0;  // the first token the cache holds
  int restarts = 0;
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    if (tokens.size() - start > 16) start = tokens.size() - 8, ++restarts;
    const std::vector<std::int32_t> window(tokens.begin() + static_cast<std::ptrdiff_t>(start), tokens.end());
    EXPECT_LT(max_abs_diff(r.logits[i], last_logits(model, window)), 2e-4) << "step " << i;
    tokens.push_back(r.tokens[i]);
  }
  // The cache holds 10 + i tokens at step i until 17 would not fit (step 7: it restarts on
  // the last 8, tokens 9..16), then i - 6 until step 16 (17 again).
  EXPECT_EQ(restarts, 2);
  ASSERT_EQ(r.notices.size(), 2u);
  EXPECT_EQ(r.notices[0], "generate: the context of 16 tokens is full (10 prompt + 7 generated); continuing on the last 8 tokens");

  const std::vector<std::int32_t> long_prompt = ids_of_length(17, c.vocab_size);
  expect_error([&] { record(model, long_prompt, 1, 0); }, {"the prompt has 17 tokens, more than the context of 16"});
  expect_error([&] { record(model, prompt, 1, 9); }, {"the prompt has 10 tokens, more than the context of 9"});
  EXPECT_EQ(record(model, long_prompt, 1, 17).tokens.size(), 1u);  // a larger explicit context reads it
}

// Tiny runs trained (3 steps) on windows of 16 tokens read a prompt of ~100 tokens whole: the
// last logits change when the first prompt token does (a context cut to the training windows
// would leave them exactly equal). Softmax with model.max_seq_len 128, and a random-feature
// kind (unlimited context).
TEST(Generate, AModelTrainedOnShortWindowsReadsTheWholePrompt) {
  dark::testing::TempDir tmp;
  for (const std::string kind : {"softmax", "performer"}) {
    nlohmann::json config = train::quiet(train::tiny_config(tmp, kind, 3));
    config["data"]["seq_len"] = 16;
    config["schedule"]["warmup_steps"] = 1;
    config["attention"] = {{"kind", kind}, {"num_features", 16}};
    if (kind == "softmax") config["model"]["max_seq_len"] = 128;
    train::train(train::parse_config(config), {});
    cli::LoadedRun run = cli::load_run(tmp / kind);
    EXPECT_EQ(run.model->decode_context(), kind == "softmax" ? 128 : 0);
    std::vector<std::int32_t> prompt = run.tokenizer->encode(dark::testing::generated_text(20, 5).substr(0, 100));
    ASSERT_EQ(prompt.size(), 100u);  // bytes
    const Recorded first = record(*run.model, prompt, 1, 0);
    prompt[0] = prompt[0] == 70 ? 71 : 70;
    const Recorded changed = record(*run.model, prompt, 1, 0);
    EXPECT_GT(max_abs_diff(first.logits[0], changed.logits[0]), 1e-5) << kind;
    EXPECT_LT(max_abs_diff(changed.logits[0], last_logits(*run.model, prompt)), 2e-4) << kind;
  }
}

}  // namespace
}  // namespace dark::nn::generate_test
