// The attention statistics the trainer logs (attention/attention_stats.h): percentiles match
// numpy's linear interpolation on hand-checked values; each kernel, asked before a forward
// pass, measures s = |q~|^2 + |k~|^2 (grouped-query heads, DARKFormer's M applied) and the
// spread of its feature logits exactly as a naive float64 loop over the same tensors does; a
// request is answered once, and gradients are unchanged by it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "attention/attention_stats.h"
#include "attention/darkformer_attention.h"
#include "attention/performer_attention.h"
#include "attention/softmax_attention.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"

// A namespace of its own: darkformer_tests compiles this file in one unit with others
// (tests/CMakeLists.txt) that name their shapes and configs alike.
namespace dark::attention::stats_test {
namespace {

constexpr std::int64_t kB = 2, kT = 9, kHq = 4, kHkv = 2, kD = 8, kM = 6;

nn::AttentionShape shape() { return {kHq, kHkv, kD, /*layer=*/0, DType::f64}; }

AttentionConfig config(Kind kind) {
  AttentionConfig c;
  c.kind = kind;
  c.num_features = kM;
  c.seed = 5;
  return c;
}

// numpy.percentile's default (linear) written out, for the references below.
double numpy_percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double h = (static_cast<double>(v.size()) - 1) * p / 100;
  const auto lo = static_cast<std::size_t>(h);
  return lo + 1 < v.size() ? v[lo] + (h - static_cast<double>(lo)) * (v[lo + 1] - v[lo]) : v[lo];
}

// s = |q~|^2 + |k~|^2 per (b, t, query head) from plain loops over (B, T, H, r) values.
std::vector<double> naive_sq_norms(const Tensor& q, const Tensor& k) {
  const auto qv = q.contiguous().to_vector<double>(), kv = k.contiguous().to_vector<double>();
  const std::int64_t H = q.size(2), Hkv = k.size(2), r = q.size(3);
  std::vector<double> out;
  for (std::int64_t b = 0; b < q.size(0); ++b)
    for (std::int64_t t = 0; t < q.size(1); ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        double s = 0;
        for (std::int64_t i = 0; i < r; ++i) s += std::pow(qv[((b * q.size(1) + t) * H + h) * r + i], 2);
        for (std::int64_t i = 0; i < r; ++i) s += std::pow(kv[((b * q.size(1) + t) * Hkv + h / (H / Hkv)) * r + i], 2);
        out.push_back(s);
      }
  return out;
}

// Standard deviation over the last axis of (..., m) logits, one value per row.
std::vector<double> naive_row_sd(const Tensor& logits) {
  const auto v = logits.contiguous().to_vector<double>();
  const std::int64_t m = logits.size(logits.dim() - 1);
  std::vector<double> out;
  for (std::size_t row = 0; row < v.size() / m; ++row) {
    double mean = 0, sq = 0;
    for (std::int64_t j = 0; j < m; ++j) mean += v[row * m + j] / m;
    for (std::int64_t j = 0; j < m; ++j) sq += std::pow(v[row * m + j] - mean, 2) / m;
    out.push_back(std::sqrt(sq));
  }
  return out;
}

Tensor input(const Shape& s, std::uint64_t stream) { return Tensor::randn(s, 17, stream, DType::f64) * 0.8; }

TEST(AttentionStats, PercentileInterpolatesLikeNumpy) {
  std::vector<double> hundred;
  for (int i = 101; i >= 1; --i) hundred.push_back(i);  // unsorted on purpose
  EXPECT_DOUBLE_EQ(percentile(hundred, 50), 51);
  EXPECT_DOUBLE_EQ(percentile(hundred, 99), 100);
  EXPECT_DOUBLE_EQ(percentile({0, 10}, 50), 5);
  EXPECT_DOUBLE_EQ(percentile({0, 10, 20, 40}, 90), 34);  // numpy.percentile([0,10,20,40], 90) = 34.0
  EXPECT_DOUBLE_EQ(percentile({3}, 99), 3);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
  EXPECT_DOUBLE_EQ(percentile({NAN, 0, 10, NAN}, 50), 5);  // a poisoned step's NaN has no rank
  EXPECT_TRUE(std::isnan(percentile({NAN}, 50)));
}

TEST(AttentionStats, SoftmaxMeasuresScaledQueriesAndKeysOnceAsked) {
  SoftmaxAttention kernel(shape());
  const Tensor q = input({kB, kT, kHq, kD}, 1), k = input({kB, kT, kHkv, kD}, 2), v = input({kB, kT, kHkv, kD}, 3);
  kernel.forward(q, k, v);
  EXPECT_FALSE(kernel.take_stats().has_value());  // not asked
  kernel.request_stats();
  kernel.forward(q, k, v);
  const auto s = kernel.take_stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(kernel.take_stats().has_value());  // answered once
  const double scale = std::pow(static_cast<double>(kD), -0.25);
  const std::vector<double> sq = naive_sq_norms(q * scale, k * scale);
  EXPECT_NEAR(s->sq_norm_p50, numpy_percentile(sq, 50), 1e-12);
  EXPECT_NEAR(s->sq_norm_p99, numpy_percentile(sq, 99), 1e-12);
  EXPECT_TRUE(std::isnan(s->logit_sd_p50));  // softmax has no features
}

TEST(AttentionStats, RandomFeatureKindsMeasureTheirTransformedInputsAndLogitSpread) {
  for (const Kind kind : {Kind::performer, Kind::darkformer}) {
    std::unique_ptr<RandomFeatureAttention> kernel;
    if (kind == Kind::performer) kernel = std::make_unique<PerformerAttention>(shape(), config(kind));
    else kernel = std::make_unique<DarkformerAttention>(shape(), config(kind));
    if (kind == Kind::darkformer) {  // a non-trivial M: the statistics must see M x~, not x~
      NoGradGuard g;
      auto& dark = static_cast<DarkformerAttention&>(*kernel);
      dark.matrix->copy_(*dark.matrix * 1.3 + input(dark.matrix->shape(), 9) * 0.2);
    }
    const Tensor q = input({kB, kT, kHq, kD}, 4).set_requires_grad(), k = input({kB, kT, kHkv, kD}, 5).set_requires_grad();
    const Tensor v = input({kB, kT, kHkv, kD}, 6);
    kernel->request_stats();
    const Tensor out = kernel->forward(q, k, v);
    const auto s = kernel->take_stats();
    ASSERT_TRUE(s.has_value());
    NoGradGuard g;
    const Tensor qt = kernel->transformed(q), kt = kernel->transformed(k);
    const std::vector<double> sq = naive_sq_norms(qt, kt);
    EXPECT_NEAR(s->sq_norm_p50, numpy_percentile(sq, 50), 1e-10);
    EXPECT_NEAR(s->sq_norm_p99, numpy_percentile(sq, 99), 1e-10);
    // feature_logits adds one constant per row (|x|^2 / 2 + ln(m) / 2), which leaves the spread.
    std::vector<double> sd = naive_row_sd(kernel->feature_logits(qt));
    const std::vector<double> sd_k = naive_row_sd(kernel->feature_logits(kt));
    sd.insert(sd.end(), sd_k.begin(), sd_k.end());
    EXPECT_NEAR(s->logit_sd_p50, numpy_percentile(sd, 50), 1e-10) << kernel->kind();
    EXPECT_NEAR(s->logit_sd_p99, numpy_percentile(sd, 99), 1e-10) << kernel->kind();
    EXPECT_GT(s->logit_sd_p99, s->logit_sd_p50);
  }
}

TEST(AttentionStats, MeasuringLeavesGradientsUnchanged) {
  const Tensor q0 = input({kB, kT, kHq, kD}, 7), k0 = input({kB, kT, kHkv, kD}, 8), v = input({kB, kT, kHkv, kD}, 9);
  std::vector<std::vector<double>> grads;
  for (const bool ask : {false, true}) {
    PerformerAttention kernel(shape(), config(Kind::performer));
    const Tensor q = q0.clone().set_requires_grad(), k = k0.clone().set_requires_grad();
    if (ask) kernel.request_stats();
    backward(sum(kernel.forward(q, k, v)));
    grads.push_back(q.grad().to_vector<double>());
    const auto kg = k.grad().to_vector<double>();
    grads.back().insert(grads.back().end(), kg.begin(), kg.end());
  }
  EXPECT_EQ(grads[0], grads[1]);  // bitwise
}

}  // namespace
}  // namespace dark::attention::stats_test
