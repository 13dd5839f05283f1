// Flat parameter buffers, AdamW / SGD against naive double-precision references of the
// PyTorch update rules, and the learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "nn/optim.h"
#include "nn/schedule.h"

namespace dark::nn {
namespace {

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

struct TwoParams {
  Tensor w = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.75f}, {2, 3});
  Tensor norm = Tensor::from_vector<float>({1.0f, 2.0f, 3.0f}, {3});
  std::vector<std::pair<std::string, Tensor*>> named() { return {{"layer.weight", &w}, {"layer.norm.weight", &norm}}; }
};

// loss = sum(w * c) + sum(norm^2): gradients c and 2 norm.
Tensor loss_of(TwoParams& p, const Tensor& c) { return add(sum(mul(p.w, c)), sum(square(p.norm))); }

TEST(ParameterBuffer, ParametersBecomeViewsAndGradientsAccumulateInPlace) {
  TwoParams p;
  ParameterBuffer buffer(p.named());
  EXPECT_TRUE(p.w.shares_storage(buffer.values()));
  EXPECT_EQ(values(p.w), (std::vector<double>{0.5, -1.0, 2.0, 0.25, 1.5, -0.75}));
  const Tensor c = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  backward(loss_of(p, c));
  backward(loss_of(p, c));  // accumulates
  EXPECT_TRUE(p.w.grad().shares_storage(buffer.grads()));
  EXPECT_EQ(values(p.w.grad()), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(values(p.norm.grad()), (std::vector<double>{4, 8, 12}));
  double sq = 0;
  for (double g : {2, 4, 6, 8, 10, 12, 4, 8, 12}) sq += g * g;
  EXPECT_NEAR(buffer.grad_norm(), std::sqrt(sq), 1e-9);
  buffer.zero_grad();
  EXPECT_EQ(values(p.norm.grad()), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(buffer.grad_norm(), 0.0);
}

TEST(Optimizer, AdamWMatchesTheReferenceUpdateAndSkipsDecayForNorms) {
  TwoParams p;
  ParameterBuffer buffer(p.named());
  OptimizerConfig config;  // adamw, betas (0.9, 0.95), eps 1e-8, wd 0.1, norms excluded
  Optimizer opt(buffer, config);
  EXPECT_TRUE(opt.decays("layer.weight"));
  EXPECT_FALSE(opt.decays("layer.norm.weight"));

  // Reference in double: torch.optim.AdamW's rule.
  std::vector<double> w = {0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, n = {1, 2, 3};
  std::vector<double> mw(6, 0), vw(6, 0), mn(3, 0), vn(3, 0);
  const std::vector<double> c = {1, -2, 3, -4, 5, -6};
  const double lrs[] = {1e-2, 5e-3, 2e-2};
  for (int t = 1; t <= 3; ++t) {
    buffer.zero_grad();
    backward(loss_of(p, Tensor::from_vector<double>(c, {2, 3}).to(DType::f32)));
    opt.step(lrs[t - 1]);
    auto update = [&](std::vector<double>& x, std::vector<double>& m, std::vector<double>& v, std::vector<double> g, double wd) {
      const double lr = lrs[t - 1];
      for (std::size_t i = 0; i < x.size(); ++i) {
        x[i] -= lr * wd * x[i];
        m[i] = 0.9 * m[i] + 0.1 * g[i];
        v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
        const double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.95, t));
        x[i] -= lr * mhat / (std::sqrt(vhat) + 1e-8);
      }
    };
    std::vector<double> gn = {2 * n[0], 2 * n[1], 2 * n[2]};
    update(w, mw, vw, c, 0.1);
    update(n, mn, vn, gn, 0.0);
  }
  const auto got_w = values(p.w), got_n = values(p.norm);
  // PyTorch decays first (p *= 1 - lr wd) and then subtracts the Adam step, which does not
  // read p: the same as our single update p -= lr (adam + wd p). Tolerance: float32.
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got_w[i], w[i], 2e-6) << i;
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got_n[i], n[i], 2e-6) << i;
  EXPECT_EQ(opt.steps_taken(), 3);

  // State round trip: a fresh optimizer loaded with the state continues identically.
  TwoParams q;
  ParameterBuffer qbuffer(q.named());
  Tensor(qbuffer.values()).copy_(buffer.values());
  Optimizer restored(qbuffer, config);
  restored.load_state(opt.state());
  EXPECT_EQ(restored.steps_taken(), 3);
  buffer.zero_grad();
  qbuffer.zero_grad();
  backward(loss_of(p, Tensor::from_vector<double>(c, {2, 3}).to(DType::f32)));
  backward(loss_of(q, Tensor::from_vector<double>(c, {2, 3}).to(DType::f32)));
  opt.step(1e-2);
  restored.step(1e-2);
  EXPECT_EQ(values(buffer.values()), values(qbuffer.values()));
}

TEST(Optimizer, SgdWithMomentumMatchesReference) {
  TwoParams p;
  ParameterBuffer buffer(p.named());
  OptimizerConfig config;
  config.name = OptimizerKind::sgd;
  config.momentum = 0.9;
  config.weight_decay = 0.0;
  Optimizer opt(buffer, config);
  std::vector<double> n = {1, 2, 3}, buf(3, 0);
  for (int t = 0; t < 3; ++t) {
    buffer.zero_grad();
    backward(sum(square(p.norm)));
    opt.step(0.1);
    for (int i = 0; i < 3; ++i) buf[i] = 0.9 * buf[i] + 2 * n[i], n[i] -= 0.1 * buf[i];
  }
  const auto got = values(p.norm);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], n[i], 1e-5);
}

TEST(Optimizer, StateOfAnotherDtypeIsAnErrorNamingTheTensor) {
  TwoParams p;
  ParameterBuffer buffer(p.named());
  Optimizer opt(buffer, OptimizerConfig{});
  std::map<std::string, Tensor> state = opt.state();
  state["exp_avg.layer.weight"] = state["exp_avg.layer.weight"].to(DType::f64);
  try {
    opt.load_state(state);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "optimizer state: 'exp_avg.layer.weight' is f64, the optimizer keeps f32");
  }
}

TEST(Schedule, WarmupThenCosineOrLinearDecay) {
  ScheduleConfig s{ScheduleKind::cosine, 10, 0.1};
  const std::int64_t total = 110;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 0, total), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 9, total), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 10, total), 1.0);
  EXPECT_NEAR(learning_rate_at(s, 1.0, 109, total), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate_at(s, 1.0, 10 + 99 / 2.0, total), 0.55, 1e-2);
  s.kind = ScheduleKind::linear;
  EXPECT_NEAR(learning_rate_at(s, 2.0, 109, total), 0.2, 1e-12);
  EXPECT_NEAR(learning_rate_at(s, 2.0, 59, total), 2.0 - 1.8 * 49.0 / 99.0, 1e-12);
  s.kind = ScheduleKind::constant;
  EXPECT_EQ(learning_rate_at(s, 3.0, 50, total), 3.0);
}

TEST(Optimizer, MatchesGlobPatterns) {
  EXPECT_TRUE(matches_any("model.layers.0.input_layernorm.weight", {"*norm*"}));
  EXPECT_TRUE(matches_any("model.embed_tokens.weight", {"*embed_tokens*"}));
  EXPECT_FALSE(matches_any("model.layers.0.mlp.up_proj.weight", {"*norm*", "*embed_tokens*"}));
}

}  // namespace
}  // namespace dark::nn
