// The attention kinds as modules (attention/): each random-feature kind against a naive
// float64 evaluation of its formula (explicit features phi, O(T^2) causal sums, GQA);
// DARKFormer with M = I equals Performer with the same draws; exact mode equals the flash
// softmax of the transformed queries and keys; float64 gradchecks through M and W;
// redraw epochs (eval determinism, different epochs differ); whiten calibration equalises
// the eigenvalues of M Lambda M^T; the variance-optimal proposal keeps the estimate unbiased,
// lowers its variance, refuses eigenvalues >= 1/2, and survives a state round trip; and at
// the model level: incremental decoding equals the full forward for every kind (also through
// sliding windows, and each windowed kind equals its formula over the window), causal
// prefixes are bit-stable, and padded keys never change a real position's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "attention/covariance.h"
#include "attention/darkformer_attention.h"
#include "attention/factory.h"
#include "attention/lfk_attention.h"
#include "attention/performer_attention.h"
#include "attention/softmax_attention.h"
#include "attention/variance_optimal.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "nn/model.h"
#include "tests/test_util.h"

namespace dark::attention {
namespace {

using testing::expect_close;
using testing::values;

constexpr std::int64_t kB = 2, kT = 13, kHq = 4, kHkv = 2, kD = 8, kM = 16;

nn::AttentionShape shape(DType dtype = DType::f64) { return {kHq, kHkv, kD, /*layer=*/1, dtype}; }

AttentionConfig config(Kind kind) {
  AttentionConfig c;
  c.kind = kind;
  c.num_features = kM;
  c.chunk_size = 4;  // several chunks and a partial one at T = 13
  c.eps = 1e-12;
  c.seed = 7;
  return c;
}

Tensor randn(const Shape& s, std::uint64_t stream, double scale = 1.0, DType dtype = DType::f64) {
  return Tensor::randn(s, 99, stream, DType::f64).to(dtype) * scale;
}

struct Qkv {
  Tensor q, k, v;
};
Qkv inputs(DType dtype = DType::f64, double scale = 0.7) {
  return {randn({kB, kT, kHq, kD}, 1, scale, dtype), randn({kB, kT, kHkv, kD}, 2, scale, dtype),
          randn({kB, kT, kHkv, kD}, 3, 1.0, dtype)};
}

// Row-major (rows x cols) block of a (n, rows, cols) tensor.
std::vector<double> block(const Tensor& t, std::int64_t index) {
  return values(core::slice(t, 0, index, index + 1).contiguous());
}

// The formula, directly: phi(x) = m^(-1/2) exp(W a(x) - |a(x)|^2 / 2 + bias) with
// a(x) = M d^(-1/4) x, out_t = sum_{j<=t} (phi(q_t) . phi(k_j)) v_j / sum_{j<=t} (...)
// (only t - window < j with a window).
// m_of(h) (r x d) and w_of(h) (m x r) per kv head; bias optional (m per kv head).
Tensor naive_attention(const Qkv& x, const std::function<std::vector<double>(std::int64_t)>& m_of, std::int64_t r,
                       const std::function<std::vector<double>(std::int64_t)>& w_of,
                       const std::function<std::vector<double>(std::int64_t)>& bias_of = nullptr,
                       std::int64_t window = 0) {
  const std::vector<double> q = values(x.q), k = values(x.k), v = values(x.v);
  const std::int64_t group = kHq / kHkv;
  const double s = std::pow(static_cast<double>(kD), -0.25);
  auto phi = [&](const double* in, std::int64_t kv) {
    const std::vector<double> M = m_of(kv), W = w_of(kv);
    const std::vector<double> bias = bias_of ? bias_of(kv) : std::vector<double>(kM, 0.0);
    std::vector<double> a(r, 0.0), out(kM);
    double sq = 0;
    for (std::int64_t i = 0; i < r; ++i) {
      for (std::int64_t j = 0; j < kD; ++j) a[i] += M[i * kD + j] * s * in[j];
      sq += a[i] * a[i];
    }
    for (std::int64_t f = 0; f < kM; ++f) {
      double dot = 0;
      for (std::int64_t i = 0; i < r; ++i) dot += W[f * r + i] * a[i];
      out[f] = std::exp(dot - sq / 2 + bias[f]) / std::sqrt(static_cast<double>(kM));
    }
    return out;
  };
  std::vector<double> out(kB * kT * kHq * kD, 0.0);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t h = 0; h < kHq; ++h) {
      const std::int64_t kv = h / group;
      for (std::int64_t t = 0; t < kT; ++t) {
        const std::vector<double> pq = phi(&q[((b * kT + t) * kHq + h) * kD], kv);
        std::vector<double> num(kD, 0.0);
        double den = 0;
        for (std::int64_t j = window > 0 ? std::max<std::int64_t>(0, t - window + 1) : 0; j <= t; ++j) {
          const std::vector<double> pk = phi(&k[((b * kT + j) * kHkv + kv) * kD], kv);
          const double a = std::inner_product(pq.begin(), pq.end(), pk.begin(), 0.0);
          den += a;
          for (std::int64_t c = 0; c < kD; ++c) num[c] += a * v[((b * kT + j) * kHkv + kv) * kD + c];
        }
        for (std::int64_t c = 0; c < kD; ++c) out[((b * kT + t) * kHq + h) * kD + c] = num[c] / den;
      }
    }
  return Tensor::from_vector(out, {kB, kT, kHq, kD});
}

std::vector<double> identity(std::int64_t d) {
  std::vector<double> m(d * d, 0.0);
  for (std::int64_t i = 0; i < d; ++i) m[i * d + i] = 1.0;
  return m;
}

std::vector<double> draw(const AttentionConfig& c, std::int64_t r, std::int64_t kv, std::int64_t epoch = 0) {
  return values(draw_features(kM, r, c.draw, FeatureKey{c.seed, 1, static_cast<int>(kv), epoch}, DType::f64));
}

TEST(AttentionKinds, PerformerEqualsTheFavorFormula) {
  for (FeatureDraw d : {FeatureDraw::iid, FeatureDraw::orthogonal}) {
    AttentionConfig c = config(Kind::performer);
    c.draw = d;
    PerformerAttention performer(shape(), c);
    const Qkv x = inputs();
    expect_close(performer.forward(x.q, x.k, x.v),
                 naive_attention(x, [](std::int64_t) { return identity(kD); }, kD,
                                 [&](std::int64_t kv) { return draw(c, kD, kv); }),
                 1e-11, 1e-9, d == FeatureDraw::iid ? "performer iid" : "performer orthogonal");
  }
}

// A sliding-window layer (shape.window) under each random-feature kind: the same formula
// summed over the window's keys only (window 5 < T 13 with chunks of 4: middle, trailing and
// diagonal chunks all occur).
TEST(AttentionKinds, WindowedKindsEqualTheFormulaOverTheWindow) {
  nn::AttentionShape windowed = shape();
  windowed.window = 5;
  const Qkv x = inputs();
  const auto no_transform = [](std::int64_t) { return identity(kD); };
  const AttentionConfig performer_config = config(Kind::performer);
  PerformerAttention performer(windowed, performer_config);
  expect_close(performer.forward(x.q, x.k, x.v),
               naive_attention(x, no_transform, kD, [&](std::int64_t kv) { return draw(performer_config, kD, kv); },
                               nullptr, 5),
               1e-11, 1e-9, "windowed performer");
  LfkAttention lfk(windowed, config(Kind::lfk));
  const Tensor W = *lfk.weight;
  expect_close(lfk.forward(x.q, x.k, x.v),
               naive_attention(x, no_transform, kD, [&](std::int64_t kv) { return block(W, kv); }, nullptr, 5), 1e-11,
               1e-9, "windowed lfk");
  AttentionConfig dark_config = config(Kind::darkformer);
  DarkformerAttention dark(windowed, dark_config);
  {
    NoGradGuard no_grad;
    dark.matrix->copy_(randn(dark.matrix->shape(), 11, 0.5));
  }
  const Tensor M = *dark.matrix;
  expect_close(dark.forward(x.q, x.k, x.v),
               naive_attention(x, [&](std::int64_t kv) { return block(M, kv); }, kD,
                               [&](std::int64_t kv) { return draw(dark_config, kD, kv); }, nullptr, 5),
               1e-11, 1e-9, "windowed darkformer");
}

TEST(AttentionKinds, DarkformerEqualsTheFormulaWithALearnedM) {
  for (MatrixScope scope : {MatrixScope::head, MatrixScope::layer})
    for (std::int64_t rank : {kD, std::int64_t{5}}) {
      AttentionConfig c = config(Kind::darkformer);
      c.darkformer.scope = scope;
      c.darkformer.rank = rank;
      DarkformerAttention dark(shape(), c);
      ASSERT_EQ(dark.matrix->shape(), Shape({scope == MatrixScope::head ? kHkv : 1, rank, kD}));
      {
        NoGradGuard no_grad;
        dark.matrix->copy_(randn(dark.matrix->shape(), 11, 0.5));
      }
      const Tensor M = *dark.matrix;
      const Qkv x = inputs();
      expect_close(dark.forward(x.q, x.k, x.v),
                   naive_attention(x, [&](std::int64_t kv) { return block(M, scope == MatrixScope::head ? kv : 0); },
                                   rank, [&](std::int64_t kv) { return draw(c, rank, kv); }),
                   1e-11, 1e-9, "darkformer rank " + std::to_string(rank));
    }
}

TEST(AttentionKinds, LfkEqualsTheFormulaWithItsW) {
  LfkAttention lfk(shape(), config(Kind::lfk));
  {
    NoGradGuard no_grad;  // move W away from its initial draw: the module must use W, not a draw
    lfk.weight->copy_(add(*lfk.weight, randn(lfk.weight->shape(), 12, 0.3)));
  }
  const Tensor W = *lfk.weight;
  const Qkv x = inputs();
  expect_close(lfk.forward(x.q, x.k, x.v),
               naive_attention(x, [](std::int64_t) { return identity(kD); }, kD, [&](std::int64_t kv) { return block(W, kv); }),
               1e-11, 1e-9, "lfk");
  lfk.set_feature_epoch(5);  // never redrawn
  expect_close(lfk.forward(x.q, x.k, x.v), lfk.forward(x.q, x.k, x.v), 0, 0, "lfk after epoch change");
}

TEST(AttentionKinds, IdentityDarkformerIsPerformerWithTheSameDraws) {
  for (DType dtype : {DType::f64, DType::f32}) {
    PerformerAttention performer(shape(dtype), config(Kind::performer));
    DarkformerAttention dark(shape(dtype), config(Kind::darkformer));
    for (std::int64_t epoch : {0, 3}) {
      performer.set_feature_epoch(epoch);
      dark.set_feature_epoch(epoch);
      const Qkv x = inputs(dtype);
      expect_close(dark.forward(x.q, x.k, x.v), performer.forward(x.q, x.k, x.v), dtype == DType::f64 ? 1e-14 : 1e-6,
                   dtype == DType::f64 ? 1e-12 : 1e-5, "identity M vs performer");
    }
  }
}

TEST(AttentionKinds, ExactModeIsFlashSoftmaxOfTheTransformedQueriesAndKeys) {
  const Qkv x = inputs();
  AttentionConfig c = config(Kind::performer);
  c.mode = Mode::exact;
  PerformerAttention performer(shape(), c);
  SoftmaxAttention softmax(shape());
  expect_close(performer.forward(x.q, x.k, x.v), softmax.forward(x.q, x.k, x.v), 1e-13, 1e-12, "exact performer");

  c.kind = Kind::darkformer;
  c.darkformer.rank = 5;
  DarkformerAttention dark(shape(), c);
  {
    NoGradGuard no_grad;
    dark.matrix->copy_(randn(dark.matrix->shape(), 13, 0.5));
  }
  const Tensor qm = dark.transformed(x.q), km = dark.transformed(x.k);  // (B, T, H, 5)
  // exp(q~^T M^T M k~) attention by an explicit causal softmax; query head h reads kv head h / 2.
  std::vector<double> ref(kB * kT * kHq * kD, 0.0);
  const std::vector<double> qv = values(qm), kvv = values(km), vv = values(x.v);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t h = 0; h < kHq; ++h)
      for (std::int64_t t = 0; t < kT; ++t) {
        std::vector<double> s(t + 1);
        for (std::int64_t j = 0; j <= t; ++j) {
          s[j] = 0;
          for (std::int64_t i = 0; i < 5; ++i)
            s[j] += qv[((b * kT + t) * kHq + h) * 5 + i] * kvv[((b * kT + j) * kHkv + h / 2) * 5 + i];
        }
        const double top = *std::max_element(s.begin(), s.end());
        double total = 0;
        for (double& e : s) total += (e = std::exp(e - top));
        for (std::int64_t j = 0; j <= t; ++j)
          for (std::int64_t d = 0; d < kD; ++d)
            ref[((b * kT + t) * kHq + h) * kD + d] += s[j] / total * vv[((b * kT + j) * kHkv + h / 2) * kD + d];
      }
  expect_close(dark.forward(x.q, x.k, x.v), Tensor::from_vector(ref, {kB, kT, kHq, kD}), 1e-12, 1e-10,
               "exact darkformer rank 5");
}

TEST(AttentionKinds, GradcheckThroughMAndW) {
  const Qkv x = inputs(DType::f64, 0.5);
  GradcheckOptions o;
  o.rtol = 1e-5;
  o.atol = 1e-8;
  {
    AttentionConfig c = config(Kind::darkformer);
    c.darkformer.rank = 6;
    c.eps = 1e-10;
    DarkformerAttention dark(shape(), c);
    Tensor M = randn(dark.matrix->shape(), 14, 0.6);
    M.set_requires_grad(true);
    std::vector<Tensor> in = {x.q, x.k, x.v, M};
    for (Tensor& t : in) t.set_requires_grad(true);
    const auto r = gradcheck(
        [&](const std::vector<Tensor>& a) {
          *dark.matrix = a[3];
          return dark.forward(a[0], a[1], a[2]);
        },
        in, o);
    EXPECT_TRUE(r.ok) << r.report;
  }
  {
    AttentionConfig c = config(Kind::lfk);
    c.eps = 1e-10;
    LfkAttention lfk(shape(), c);
    Tensor W = lfk.weight->detach().contiguous();
    std::vector<Tensor> in = {x.q, x.k, x.v, W};
    for (Tensor& t : in) t.set_requires_grad(true);
    const auto r = gradcheck(
        [&](const std::vector<Tensor>& a) {
          *lfk.weight = a[3];
          return lfk.forward(a[0], a[1], a[2]);
        },
        in, o);
    EXPECT_TRUE(r.ok) << r.report;
  }
}

TEST(AttentionKinds, EvalIsDeterministicAndEpochsRedraw) {
  PerformerAttention performer(shape(DType::f32), config(Kind::performer));
  const Qkv x = inputs(DType::f32);
  const std::vector<double> first = values(performer.forward(x.q, x.k, x.v));
  EXPECT_EQ(values(performer.forward(x.q, x.k, x.v)), first);
  performer.set_feature_epoch(1);
  EXPECT_NE(values(performer.forward(x.q, x.k, x.v)), first);
  performer.set_feature_epoch(0);
  EXPECT_EQ(values(performer.forward(x.q, x.k, x.v)), first);
  // A second module with the same seed, layer and epoch draws the same features.
  PerformerAttention twin(shape(DType::f32), config(Kind::performer));
  EXPECT_EQ(values(twin.forward(x.q, x.k, x.v)), first);
}

// Queries and keys with second moment A A^T (anisotropic), for calibration tests.
Qkv anisotropic(double scale) {
  std::vector<double> a(kD * kD, 0.0);
  for (std::int64_t i = 0; i < kD; ++i) a[i * kD + i] = scale * std::pow(0.6, static_cast<double>(i));
  a[1] = 0.3 * scale;  // correlate the first two axes
  const Tensor A = Tensor::from_vector(a, {kD, kD});
  const double unscale = std::pow(static_cast<double>(kD), 0.25);  // the module scales by d^(-1/4)
  Qkv x = inputs(DType::f64, 1.0);
  x.q = matmul(x.q, A, false, true) * unscale;
  x.k = matmul(x.k, A, false, true) * unscale;
  return x;
}

TEST(AttentionKinds, WhitenCalibrationEqualisesTheEigenvaluesOfMLambdaMt) {
  AttentionConfig c = config(Kind::darkformer);
  c.darkformer.init = MatrixInit::whiten;
  c.darkformer.scope = MatrixScope::layer;
  DarkformerAttention dark(shape(), c);
  ASSERT_TRUE(dark.needs_calibration());
  const Qkv x = anisotropic(1.0);
  dark.begin_calibration();
  dark.forward(x.q, x.k, x.v);
  dark.end_calibration();
  // The pooled second moment of the scaled queries and keys, measured independently here.
  SecondMoments moments(1, kD);
  const double s = std::pow(static_cast<double>(kD), -0.25);
  moments.add(reshape(x.q * s, {kB, kT * kHq, 1, kD}));
  moments.add(reshape(x.k * s, {kB, kT * kHkv, 1, kD}));
  std::vector<double> lambda = moments.moment(0);
  // Queries count 2x per kv head in the module's pooling (two query heads per kv head), so
  // weigh the same way: module moment = (2 E[q q^T] + E[k k^T]) / 3 per head.
  SecondMoments q_only(1, kD), k_only(1, kD);
  q_only.add(reshape(x.q * s, {kB, kT * kHq, 1, kD}));
  k_only.add(reshape(x.k * s, {kB, kT * kHkv, 1, kD}));
  const std::vector<double> mq = q_only.moment(0), mk = k_only.moment(0);
  for (std::size_t i = 0; i < lambda.size(); ++i) lambda[i] = (2 * mq[i] + mk[i]) / 3;
  const std::vector<double> M = block(*dark.matrix, 0);
  const std::vector<double> mlm = congruence(M, lambda, kD, kD);
  double trace = 0;
  for (std::int64_t i = 0; i < kD; ++i) trace += lambda[i * kD + i];
  for (std::int64_t i = 0; i < kD; ++i)
    for (std::int64_t j = 0; j < kD; ++j)
      EXPECT_NEAR(mlm[i * kD + j], i == j ? trace / kD : 0.0, 1e-9 * trace) << i << "," << j;
}

TEST(AttentionKinds, SymmetricEigenReconstructsTheMatrix) {
  const std::int64_t d = 7;
  const std::vector<double> g = values(randn({d, d}, 21));
  std::vector<double> a(d * d, 0.0);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t j = 0; j < d; ++j)
      for (std::int64_t k = 0; k < d; ++k) a[i * d + j] += g[i * d + k] * g[j * d + k];
  const SymmetricEigen e = symmetric_eigen(a, d);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t j = 0; j < d; ++j) {
      double r = 0;
      for (std::int64_t c = 0; c < d; ++c) r += e.vectors[i * d + c] * e.values[c] * e.vectors[j * d + c];
      EXPECT_NEAR(r, a[i * d + j], 1e-11);
    }
  EXPECT_TRUE(std::is_sorted(e.values.begin(), e.values.end()));
}

// The decomposition on what calibration can produce beyond a well-conditioned moment: zero,
// repeated and negative eigenvalues, rank one, an ill-conditioned (Hilbert) matrix, an already
// tridiagonal one, and Gemma 3's head width: A = V diag V^T with V orthonormal, each to 1e-12
// of A's scale.
TEST(AttentionKinds, SymmetricEigenHandlesDegenerateAndWideMatrices) {
  auto check = [](const std::string& name, const std::vector<double>& a, std::int64_t d) {
    SCOPED_TRACE(name);
    const SymmetricEigen e = symmetric_eigen(a, d);
    double scale = 1e-300;
    for (const double x : a) scale = std::max(scale, std::fabs(x));
    for (std::int64_t i = 0; i < d; ++i)
      for (std::int64_t j = 0; j < d; ++j) {
        double r = 0, o = 0;
        for (std::int64_t c = 0; c < d; ++c) {
          r += e.vectors[i * d + c] * e.values[c] * e.vectors[j * d + c];
          o += e.vectors[c * d + i] * e.vectors[c * d + j];
        }
        ASSERT_NEAR(r, a[i * d + j], 1e-12 * scale) << i << "," << j;
        ASSERT_NEAR(o, i == j ? 1.0 : 0.0, 1e-12) << i << "," << j;
      }
    EXPECT_TRUE(std::is_sorted(e.values.begin(), e.values.end()));
  };
  const std::int64_t d = 24;
  std::vector<double> zero(d * d, 0.0), repeated(d * d, 0.0), rank_one(d * d), hilbert(d * d), indefinite(d * d),
      tridiagonal(d * d, 0.0);
  const std::vector<double> x = values(randn({d}, 22)), g = values(randn({d, d}, 23));
  for (std::int64_t i = 0; i < d; ++i) {
    repeated[i * d + i] = static_cast<double>(i % 3) - 1.0;
    tridiagonal[i * d + i] = 2;
    if (i + 1 < d) tridiagonal[i * d + i + 1] = tridiagonal[(i + 1) * d + i] = -1;
    for (std::int64_t j = 0; j < d; ++j) {
      rank_one[i * d + j] = x[i] * x[j];
      hilbert[i * d + j] = 1.0 / static_cast<double>(i + j + 1);
      indefinite[i * d + j] = g[std::max(i, j) * d + std::min(i, j)];
    }
  }
  check("zero", zero, d);
  check("repeated", repeated, d);
  check("rank one", rank_one, d);
  check("hilbert", hilbert, d);
  check("indefinite", indefinite, d);
  check("tridiagonal", tridiagonal, d);
  const std::int64_t wide = 256;
  const std::vector<double> h = values(randn({wide, wide}, 24));
  std::vector<double> moment(wide * wide, 0.0);
  for (std::int64_t i = 0; i < wide; ++i)
    for (std::int64_t k = 0; k < wide; ++k)
      for (std::int64_t j = 0; j < wide; ++j) moment[i * wide + j] += h[i * wide + k] * h[j * wide + k] / wide;
  check("256 wide", moment, wide);
}

// One-feature estimates w(omega) phi(a) phi(b) m of exp(a . b) over `n` features drawn iid
// (m = 1 each), isotropic or from the variance-optimal proposal for Lambda.
std::vector<double> single_feature_estimates(const std::vector<double>& a, const std::vector<double>& b,
                                             const ImportanceProposal* proposal, std::int64_t n, std::uint64_t seed) {
  const std::int64_t d = static_cast<std::int64_t>(a.size());
  const Tensor g = Tensor::randn({n, d}, seed, 5, DType::f64);
  ProposalFeatures f{g, Tensor::zeros({n}, DType::f64)};
  if (proposal) f = apply_proposal(*proposal, g);
  const std::vector<double> w = values(f.omega), lw = values(f.half_log_weight);
  double a2 = 0, b2 = 0;
  for (std::int64_t i = 0; i < d; ++i) a2 += a[i] * a[i], b2 += b[i] * b[i];
  std::vector<double> out(n);
  for (std::int64_t s = 0; s < n; ++s) {
    double wa = 0, wb = 0;
    for (std::int64_t i = 0; i < d; ++i) wa += w[s * d + i] * a[i], wb += w[s * d + i] * b[i];
    out[s] = std::exp(wa - a2 / 2 + lw[s]) * std::exp(wb - b2 / 2 + lw[s]);
  }
  return out;
}

TEST(AttentionKinds, VarianceOptimalProposalIsUnbiasedAndLowersTheVariance) {
  const std::int64_t d = 4;
  // Lambda = diag(0.3, 0.12, 0.04, 0.01) rotated: anisotropic, every eigenvalue < 1/4 so the
  // isotropic variance is finite too.
  const std::vector<double> eig = {0.3, 0.12, 0.04, 0.01};
  std::vector<double> rot = values(randn({d, d}, 31));
  householder_q(rot, d);
  std::vector<double> lambda(d * d, 0.0);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t j = 0; j < d; ++j)
      for (std::int64_t c = 0; c < d; ++c) lambda[i * d + j] += rot[i * d + c] * eig[c] * rot[j * d + c];
  const ImportanceProposal p = variance_optimal_proposal(lambda, d, "test");
  // Pairs (a, b) ~ N(0, Lambda).
  const std::vector<double> z = values(randn({400, 2, d}, 32));
  std::vector<double> iso_rel_var, opt_rel_var;
  int unbiased_fail = 0;
  for (std::int64_t pair = 0; pair < 400; ++pair) {
    std::vector<double> a(d, 0.0), b(d, 0.0);
    for (std::int64_t i = 0; i < d; ++i)
      for (std::int64_t c = 0; c < d; ++c) {
        a[i] += rot[i * d + c] * std::sqrt(eig[c]) * z[(pair * 2) * d + c];
        b[i] += rot[i * d + c] * std::sqrt(eig[c]) * z[(pair * 2 + 1) * d + c];
      }
    const double exact = std::exp(std::inner_product(a.begin(), a.end(), b.begin(), 0.0));
    for (const ImportanceProposal* proposal : {static_cast<const ImportanceProposal*>(nullptr), &p}) {
      const std::vector<double> est = single_feature_estimates(a, b, proposal, 4000, 100 + pair);
      const double mean = std::accumulate(est.begin(), est.end(), 0.0) / est.size();
      double var = 0;
      for (double e : est) var += (e - mean) * (e - mean);
      var /= static_cast<double>(est.size() - 1);
      if (std::fabs(mean - exact) > 5 * std::sqrt(var / est.size())) ++unbiased_fail;
      (proposal ? opt_rel_var : iso_rel_var).push_back(var / (exact * exact));
    }
  }
  EXPECT_LE(unbiased_fail, 4) << "of 800 means outside 5 standard errors";
  const double iso = std::accumulate(iso_rel_var.begin(), iso_rel_var.end(), 0.0) / 400;
  const double opt = std::accumulate(opt_rel_var.begin(), opt_rel_var.end(), 0.0) / 400;
  std::sort(iso_rel_var.begin(), iso_rel_var.end());
  std::sort(opt_rel_var.begin(), opt_rel_var.end());
  EXPECT_LT(opt, 0.9 * iso) << "mean relative variance: variance_optimal " << opt << " vs isotropic " << iso;
  EXPECT_LT(opt_rel_var[396], iso_rel_var[396]) << "99th percentile";
  RecordProperty("mean_rel_var_isotropic", std::to_string(iso));
  RecordProperty("mean_rel_var_variance_optimal", std::to_string(opt));
}

TEST(AttentionKinds, VarianceOptimalRefusesLargeEigenvaluesAndRoundTripsItsState) {
  std::vector<double> lambda = identity(3);
  for (double& x : lambda) x *= 0.6;
  testing::expect_error([&] { variance_optimal_proposal(lambda, 3, "layer 2 kv head 0"); },
                        {"layer 2 kv head 0", "below 1/2", "0.6", "isotropic"});

  AttentionConfig c = config(Kind::performer);
  c.proposal = Proposal::variance_optimal;
  PerformerAttention performer(shape(), c);
  const Qkv x = anisotropic(0.3);
  testing::expect_error([&] { performer.forward(x.q, x.k, x.v); }, {"calibration"});
  performer.begin_calibration();
  performer.forward(x.q, x.k, x.v);
  performer.end_calibration();
  const std::vector<double> out = values(performer.forward(x.q, x.k, x.v));
  const auto state = performer.extra_state();
  ASSERT_EQ(state.size(), 2u);
  PerformerAttention restored(shape(), c);
  restored.load_extra_state(state);
  EXPECT_EQ(values(restored.forward(x.q, x.k, x.v)), out);
  // Same kernel, different estimator: close to the isotropic Performer's output, not equal.
  PerformerAttention isotropic(shape(), config(Kind::performer));
  const std::vector<double> iso = values(isotropic.forward(x.q, x.k, x.v));
  EXPECT_NE(iso, out);
}

// ---- model level ----
nn::ModelConfig tiny_model() {
  nn::ModelConfig m;
  m.vocab_size = 23;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 48;
  m.dtype = DType::f64;
  m.init_std = 0.3;  // large enough that attention is far from uniform
  m.seed = 5;
  return m;
}

std::vector<AttentionConfig> every_kind() {
  std::vector<AttentionConfig> out;
  for (Kind k : {Kind::softmax, Kind::performer, Kind::lfk, Kind::darkformer}) out.push_back(config(k));
  AttentionConfig exact = config(Kind::darkformer);
  exact.mode = Mode::exact;
  exact.darkformer.rank = 6;
  out.push_back(exact);
  AttentionConfig layer_scope = config(Kind::darkformer);
  layer_scope.darkformer.scope = MatrixScope::layer;
  layer_scope.darkformer.rank = 4;
  out.push_back(layer_scope);
  // The exact window (attention/exact_window.h), inside and beyond the gemma3 local window of 6.
  AttentionConfig near_dark = config(Kind::darkformer);
  near_dark.darkformer.rank = 6;
  near_dark.exact_window = 4;
  out.push_back(near_dark);
  AttentionConfig near_lfk = config(Kind::lfk);
  near_lfk.exact_window = 7;
  out.push_back(near_lfk);
  return out;
}

std::string label(const AttentionConfig& c) {
  return std::string(enum_name(c.kind)) + (c.mode == Mode::exact ? " exact" : "") + " rank " +
         std::to_string(c.darkformer.rank) + (c.exact_window > 0 ? " exact window " + std::to_string(c.exact_window) : "");
}

Tensor token_ids(std::int64_t batch, std::int64_t len, std::uint64_t seed) {
  std::vector<std::int32_t> ids(batch * len);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + seed * 13 + i * i) % 23);
  return Tensor::from_vector(ids, {batch, len});
}

TEST(AttentionKindsModel, DecodingEqualsTheFullForward) {
  for (const AttentionConfig& c : every_kind()) {
    nn::CausalLM model(tiny_model(), make_factory(c));
    model.train(false);
    const Tensor ids = token_ids(2, 21, 1);
    NoGradGuard no_grad;
    const Tensor full = model.forward(ids);
    nn::DecodeCache cache;
    std::vector<Tensor> parts = {model.decode(core::slice(ids, 1, 0, 9).contiguous(), cache)};  // a prefill
    for (std::int64_t t = 9; t < 21; ++t) parts.push_back(model.decode(core::slice(ids, 1, t, t + 1).contiguous(), cache));
    EXPECT_EQ(cache.position, 21);
    expect_close(concat(parts, 1), full, 1e-10, 1e-9, "decode vs forward, " + label(c));
  }
}

// Every layer of a gemma3-family model windowed (window 6 < 21 positions on the local
// layer 0; layer 1 global), every kind on both: decoding equals the full forward, so the
// windowed decode state drops exactly the keys that leave the window.
TEST(AttentionKindsModel, WindowedDecodingEqualsTheFullForward) {
  for (const AttentionConfig& c : every_kind()) {
    nn::ModelConfig mc = tiny_model();
    mc.family = nn::ModelFamily::gemma3;
    mc.sliding_window = 6;
    mc.sliding_window_pattern = 2;
    nn::CausalLM model(mc, make_factory(c));
    model.train(false);
    const Tensor ids = token_ids(2, 21, 3);
    NoGradGuard no_grad;
    const Tensor full = model.forward(ids);
    nn::DecodeCache cache;
    std::vector<Tensor> parts = {model.decode(core::slice(ids, 1, 0, 9).contiguous(), cache)};
    for (std::int64_t t = 9; t < 21; ++t) parts.push_back(model.decode(core::slice(ids, 1, t, t + 1).contiguous(), cache));
    expect_close(concat(parts, 1), full, 1e-10, 1e-9, "windowed decode vs forward, " + label(c));
  }
}

TEST(AttentionKindsModel, CausalPrefixesAreBitStable) {
  for (const AttentionConfig& c : every_kind()) {
    nn::ModelConfig mc = tiny_model();
    mc.dtype = DType::f32;
    nn::CausalLM model(mc, make_factory(c));
    NoGradGuard no_grad;
    const Tensor a = model.forward(token_ids(1, 40, 1));
    std::vector<std::int32_t> changed = token_ids(1, 40, 1).to_vector<std::int32_t>();
    for (std::size_t t = 17; t < changed.size(); ++t) changed[t] = (changed[t] + 5) % 23;
    const Tensor b = model.forward(Tensor::from_vector(changed, {1, 40}));
    EXPECT_EQ(values(core::slice(a, 1, 0, 17).contiguous()), values(core::slice(b, 1, 0, 17).contiguous())) << label(c);
    EXPECT_NE(values(core::slice(a, 1, 17, 40).contiguous()), values(core::slice(b, 1, 17, 40).contiguous())) << label(c);
  }
}

TEST(AttentionKindsModel, PaddedKeysNeverChangeARealPosition) {
  const std::int64_t len = 24;
  std::vector<std::int32_t> real(2 * len);
  for (std::int64_t j = 0; j < len; ++j) {
    real[j] = j >= 6;                       // row 0: left padding
    real[len + j] = (j * 5 + 1) % 7 >= 2;  // row 1: holes
  }
  const Tensor mask = Tensor::from_vector(real, {2, len});
  for (const AttentionConfig& c : every_kind()) {
    nn::CausalLM model(tiny_model(), make_factory(c));
    NoGradGuard no_grad;
    const Tensor a = model.forward(token_ids(2, len, 1), 0, mask);
    std::vector<std::int32_t> other = token_ids(2, len, 1).to_vector<std::int32_t>();
    for (std::size_t i = 0; i < other.size(); ++i)
      if (!real[i]) other[i] = (other[i] + 3) % 23;
    const Tensor b = model.forward(Tensor::from_vector(other, {2, len}), 0, mask);
    const std::vector<double> va = values(a), vb = values(b);
    const std::int64_t vocab = 23;
    for (std::size_t i = 0; i < real.size(); ++i) {
      if (!real[i]) continue;
      for (std::int64_t w = 0; w < vocab; ++w)
        ASSERT_EQ(va[i * vocab + w], vb[i * vocab + w]) << label(c) << ": position " << i;
    }
  }
}

TEST(AttentionKindsModel, LeftPaddedSoftmaxEqualsTheUnpaddedSequence) {
  // RoPE is relative, so with its padding masked a left-padded document gives the logits it
  // gives alone.
  nn::CausalLM model(tiny_model(), make_factory(config(Kind::softmax)));
  NoGradGuard no_grad;
  const Tensor alone = model.forward(token_ids(1, 15, 2));
  const Tensor padded_ids = concat({Tensor::zeros({1, 5}, DType::i32), token_ids(1, 15, 2)}, 1);
  std::vector<std::int32_t> real(20, 1);
  std::fill(real.begin(), real.begin() + 5, 0);
  const Tensor padded = model.forward(padded_ids, 0, Tensor::from_vector(real, {1, 20}));
  expect_close(core::slice(padded, 1, 5, 20).contiguous(), alone, 1e-10, 1e-9, "left padding");
}

TEST(AttentionKindsModel, PaddingInTheLossIgnoresPaddedTargets) {
  nn::CausalLM model(tiny_model(), make_factory(config(Kind::performer)));
  NoGradGuard no_grad;
  const Tensor tokens = token_ids(1, 12, 3);
  std::vector<std::int32_t> real(12, 1);
  real[10] = real[11] = 0;  // right padding: the last two tokens
  const double padded = model.loss(tokens, 0, Tensor::from_vector(real, {1, 12})).item();
  const double trimmed = model.loss(core::slice(tokens, 1, 0, 10).contiguous()).item();
  EXPECT_NEAR(padded, trimmed, 1e-12);
}

}  // namespace
}  // namespace dark::attention
