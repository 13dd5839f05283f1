// Sampling: greedy and top-k choices, the temperature-scaled distribution, determinism.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/factory.h"
#include "nn/generate.h"

namespace dark::nn {
namespace {

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

TEST(Generate, SameSeedSameTokens) {
  ModelConfig c;
  c.vocab_size = 50, c.d_model = 16, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 32;
  c.init_std = 0.5;
  CausalLM model(c, attention::make_factory({}));
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

}  // namespace
}  // namespace dark::nn
