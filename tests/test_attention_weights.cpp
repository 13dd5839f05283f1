// The attention-weight term of attention transfer (train/swap/attention_weights.h) against a
// naive float64 computation written out here: the kernel's weights near (exact) and far
// (feature products), its normaliser with the eps guard at the running far-key offset, the
// source's softmax over the same keys, KL summed per row and averaged. The weights are the
// kernel's own: sum_j Q_ij v_j equals the kernel's output at every sampled row. Shapes as
// Gemma 3's (4 query heads on 1 key/value head), with and without the exact window, on global
// and sliding-window layers, in mode exact; gradients against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention/factory.h"
#include "attention/random_feature_attention.h"
#include "autograd/gradcheck.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "train/swap/attention_weights.h"

namespace dark::train::attention_weights_test {
namespace {

struct Case {
  std::string name;
  attention::Kind kind;
  int exact_window = 0;
  std::int64_t layer_window = 0;  // sliding-window layer
  attention::Mode mode = attention::Mode::linear;
  double eps = 1e-6;
  int rank = 0;  // darkformer
  attention::FarField far_field = attention::FarField::features;
};

constexpr std::int64_t kB = 2, kT = 20, kHq = 4, kHkv = 1, kD = 8, kM = 16;

std::unique_ptr<attention::RandomFeatureAttention> make_kernel(const Case& c, DType dtype = DType::f64) {
  attention::AttentionConfig config;
  config.kind = c.kind;
  config.num_features = kM;
  config.exact_window = c.exact_window;
  config.mode = c.mode;
  config.eps = c.eps;
  config.darkformer.rank = c.rank;
  config.far_field = c.far_field;
  config.seed = 11;
  std::unique_ptr<nn::AttentionKernel> k =
      attention::make_factory(config)(nn::AttentionShape{kHq, kHkv, kD, 0, dtype, c.layer_window});
  auto* rf = dynamic_cast<attention::RandomFeatureAttention*>(k.release());
  EXPECT_NE(rf, nullptr);
  std::unique_ptr<attention::RandomFeatureAttention> out(rf);
  NoGradGuard no_grad;
  for (auto& [name, p] : out->named_parameters())  // DARKFormer's M away from the identity
    p->copy_(add(*p, mul_scalar(Tensor::randn(p->shape(), 21, 0, DType::f64), 0.2).to(dtype)));
  out->set_feature_epoch(2);
  return out;
}

std::vector<double> host(const Tensor& t) { return t.detach().to(DType::f64).contiguous().to_vector<double>(); }

// The naive divergence, and for each (b, h, row) the kernel-weighted sum of v (to compare with
// the kernel's output).
struct Naive {
  double divergence = 0;
  std::vector<double> weighted_v;  // (B, R, Hq, D)
};

Naive naive(attention::RandomFeatureAttention& kernel, const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
            const Tensor& qs, const Tensor& ks, const std::vector<std::int64_t>& rows) {
  NoGradGuard no_grad;
  const std::int64_t r = kernel.transformed_dim();
  const std::vector<double> xq = host(kernel.transformed(q)), xk = host(kernel.transformed(k));
  const bool exact = c.mode == attention::Mode::exact;
  const std::vector<double> lq = exact ? std::vector<double>() : host(kernel.feature_logits(kernel.transformed(q)));
  const std::vector<double> lk = exact ? std::vector<double>() : host(kernel.feature_logits(kernel.transformed(k)));
  const std::vector<double> vv = host(v), qv = host(qs), kv = host(ks);
  const auto R = static_cast<std::int64_t>(rows.size());
  Naive out;
  out.weighted_v.assign(static_cast<std::size_t>(kB * R * kHq * kD), 0.0);
  double total = 0;
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t h = 0; h < kHq; ++h)
      for (std::int64_t ri = 0; ri < R; ++ri) {
        const std::int64_t i = rows[ri], g = h / (kHq / kHkv);
        std::vector<double> w(kT, 0.0), s(kT, -std::numeric_limits<double>::infinity());
        double z = 0, far_max = -std::numeric_limits<double>::infinity(), q_max = -1e300;
        if (!exact)
          for (std::int64_t f = 0; f < kM; ++f) q_max = std::max(q_max, lq[((b * kT + i) * kHq + h) * kM + f]);
        const bool window_only = c.far_field == attention::FarField::none;
        for (std::int64_t j = 0; j <= i; ++j) {
          if (c.layer_window > 0 && i - j >= c.layer_window) continue;
          if (window_only && i - j >= c.exact_window) continue;
          double src = 0;
          for (std::int64_t d = 0; d < kD; ++d) src += qv[((b * kT + i) * kHq + h) * kD + d] * kv[((b * kT + j) * kHkv + g) * kD + d];
          s[j] = src / std::sqrt(static_cast<double>(kD));
          if (exact || window_only || i - j < c.exact_window) {
            double dot = 0;
            for (std::int64_t d = 0; d < r; ++d) dot += xq[((b * kT + i) * kHq + h) * r + d] * xk[((b * kT + j) * kHkv + g) * r + d];
            w[j] = std::exp(dot);
          } else {
            for (std::int64_t f = 0; f < kM; ++f) {
              const double kf = lk[((b * kT + j) * kHkv + g) * kM + f];
              w[j] += std::exp(lq[((b * kT + i) * kHq + h) * kM + f] + kf);
              far_max = std::max(far_max, kf);
            }
          }
          z += w[j];
        }
        if (!exact && far_max > -1e300) z += c.eps * std::exp(q_max + far_max);
        double s_max = -1e300, p_sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) s_max = std::max(s_max, s[j]);
        for (std::int64_t j = 0; j <= i; ++j) p_sum += std::exp(s[j] - s_max);
        for (std::int64_t j = 0; j <= i; ++j) {
          if (w[j] == 0) continue;
          const double p = std::exp(s[j] - s_max) / p_sum, qw = w[j] / z;
          total += p * std::log(p / qw);
          for (std::int64_t d = 0; d < kD; ++d)
            out.weighted_v[((b * R + ri) * kHq + h) * kD + d] += qw * vv[((b * kT + j) * kHkv + g) * kD + d];
        }
      }
  out.divergence = total / static_cast<double>(kB * kHq * R);
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"performer", attention::Kind::performer},
      {"performer, eps 0.05", attention::Kind::performer, 0, 0, attention::Mode::linear, 0.05},
      {"darkformer rank 6, window 4", attention::Kind::darkformer, 4, 0, attention::Mode::linear, 1e-6, 6},
      {"lfk, window 3, sliding window 12", attention::Kind::lfk, 3, 12},
      {"darkformer, sliding window 10, eps 0.05", attention::Kind::darkformer, 0, 10, attention::Mode::linear, 0.05},
      {"performer, mode exact", attention::Kind::performer, 0, 0, attention::Mode::exact},
      {"darkformer, window only (5 keys)", attention::Kind::darkformer, 5, 0, attention::Mode::linear, 1e-6, 0,
       attention::FarField::none},
  };
  return all;
}

std::vector<Tensor> inputs() {
  return {mul_scalar(Tensor::randn({kB, kT, kHq, kD}, 31, 0, DType::f64), 0.8),
          mul_scalar(Tensor::randn({kB, kT, kHkv, kD}, 31, 1, DType::f64), 0.8),
          Tensor::randn({kB, kT, kHkv, kD}, 31, 2, DType::f64),
          Tensor::randn({kB, kT, kHq, kD}, 31, 3, DType::f64),
          Tensor::randn({kB, kT, kHkv, kD}, 31, 4, DType::f64)};
}

TEST(AttentionWeights, DivergenceEqualsANaiveComputationWithTheKernelsOwnWeights) {
  const std::vector<std::int64_t> rows = {0, 2, 3, 4, 9, 12, 19};
  const std::vector<Tensor> in = inputs();
  for (const Case& c : cases()) {
    auto kernel = make_kernel(c);
    const double got = attention_weight_divergence(*kernel, in[0], in[1], in[3], in[4], rows).item();
    const Naive want = naive(*kernel, c, in[0], in[1], in[2], in[3], in[4], rows);
    EXPECT_NEAR(got, want.divergence, 1e-10 * std::max(1.0, want.divergence)) << c.name;
    EXPECT_GT(want.divergence, 0.01) << c.name << ": a case where the weights differ";
    // The weights are the kernel's: its output at the sampled rows is sum_j Q_ij v_j.
    const Tensor index = Tensor::from_vector(rows, {static_cast<std::int64_t>(rows.size())});
    const std::vector<double> out = host(index_select(kernel->forward(in[0], in[1], in[2]), 1, index));
    ASSERT_EQ(out.size(), want.weighted_v.size());
    double worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - want.weighted_v[i]));
    EXPECT_LT(worst, 1e-10) << c.name;
  }
}

// In float32 (as models train), within float32's rounding of the float64 computation.
TEST(AttentionWeights, Float32FollowsFloat64) {
  const std::vector<std::int64_t> rows = {0, 3, 9, 19};
  const std::vector<Tensor> in = inputs();
  for (const Case& c : cases()) {
    auto k64 = make_kernel(c);
    auto k32 = make_kernel(c, DType::f32);
    const double want = attention_weight_divergence(*k64, in[0], in[1], in[3], in[4], rows).item();
    const auto f32 = [](const Tensor& t) { return t.to(DType::f32); };
    const Tensor got = attention_weight_divergence(*k32, f32(in[0]), f32(in[1]), f32(in[3]), f32(in[4]), rows);
    EXPECT_EQ(got.dtype(), DType::f32) << c.name;
    EXPECT_NEAR(got.item(), want, 1e-5 * std::max(1.0, want)) << c.name;
  }
}

// The source's own weights give 0 (a kernel in mode exact on queries and keys scaled to make
// its transformed scores the softmax's).
TEST(AttentionWeights, TheSourcesOwnWeightsDivergeByZero) {
  const Case c{"performer, mode exact", attention::Kind::performer, 0, 0, attention::Mode::exact};
  auto kernel = make_kernel(c);
  const std::vector<Tensor> in = inputs();
  EXPECT_NEAR(attention_weight_divergence(*kernel, in[0], in[1], in[0], in[1], {1, 5, 19}).item(), 0.0, 1e-12);
}

// Gradients of the queries, keys and the kernel's own parameters against finite differences
// (eps tiny: the eps guard's offsets are constants, as in the kernel's backward).
TEST(AttentionWeights, GradcheckOfQueriesKeysAndTheKernelsParameters) {
  const std::vector<std::int64_t> rows = {1, 6, 11};
  for (Case c : {Case{"darkformer rank 6, window 4", attention::Kind::darkformer, 4, 0, attention::Mode::linear, 1e-12, 6},
                 Case{"lfk, sliding window 9", attention::Kind::lfk, 0, 9, attention::Mode::linear, 1e-12}}) {
    auto kernel = make_kernel(c);
    std::vector<Tensor> in = inputs();
    for (Tensor& t : in) t = core::slice(core::slice(t, 0, 0, 1), 1, 0, 12).contiguous();  // fewer differences to take
    std::vector<Tensor*> params;
    for (auto& [name, p] : kernel->named_parameters()) params.push_back(p);
    ASSERT_EQ(params.size(), 1u) << c.name;
    std::vector<Tensor> leaves = {mul_scalar(in[0], 0.5), mul_scalar(in[1], 0.5), params[0]->detach()};
    for (Tensor& t : leaves) t.set_requires_grad(true);
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& x) {
          *params[0] = x[2];
          return attention_weight_divergence(*kernel, x[0], x[1], in[3], in[4], rows);
        },
        leaves);
    EXPECT_TRUE(r.ok) << c.name << ": " << r.report;
  }
}

}  // namespace
}  // namespace dark::train::attention_weights_test
