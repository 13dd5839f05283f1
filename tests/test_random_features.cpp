// Random features (attention/random_features.h): the orthogonal blocks (orthogonality, chi_d
// norms, the sign(diag R) correction that makes them Haar), keyed determinism, the FAVOR+
// logits against naive loops and finite differences, and the statistics of the estimator
// from docs/method.md sections 2 and 3: unbiasedness (Performer and DARKFormer), the
// single-feature relative variance exp(|a + b|^2) - 1, orthogonal below iid, and whitening.
// Every test is seeded, so its numbers are fixed; each assertion states its draw count and
// the standard-error bound it uses (4 standard errors unless said otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "attention/random_features.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace dark {
namespace {

using attention::draw_features;
using attention::favor_logits;
using attention::FeatureDraw;
using attention::FeatureKey;
using attention::FeatureNorms;

struct Stats {
  double mean = 0, var = 0, se = 0, m4 = 0;  // var: sample variance; m4: 4th central moment
};

Stats stats_of(const std::vector<double>& v) {
  Stats s;
  const double n = static_cast<double>(v.size());
  for (double x : v) s.mean += x;
  s.mean /= n;
  for (double x : v) {
    const double c = x - s.mean;
    s.var += c * c;
    s.m4 += c * c * c * c;
  }
  s.m4 /= n;
  s.var /= n - 1;
  s.se = std::sqrt(s.var / n);
  return s;
}

// Standard error of the sample variance: sqrt((mu4 - sigma^4) / n), from the sample moments.
double variance_se(const Stats& s, std::size_t n) {
  return std::sqrt(std::max(0.0, s.m4 - s.var * s.var) / static_cast<double>(n));
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// phi(q) . phi(k) with phi = exp(favor_logits(., omega)); q and k are (1, d) f64 tensors.
double favor_estimate(const Tensor& q, const Tensor& k, const Tensor& omega) {
  const auto lq = favor_logits(q, omega).to_vector<double>();
  const auto lk = favor_logits(k, omega).to_vector<double>();
  double s = 0;
  for (std::size_t j = 0; j < lq.size(); ++j) s += std::exp(lq[j] + lk[j]);
  return s;
}

FeatureKey key_of(std::uint64_t seed, int layer, int head, std::int64_t epoch) {
  FeatureKey key;
  key.seed = seed;
  key.layer = layer;
  key.head = head;
  key.epoch = epoch;
  return key;
}

// ------------------------------------------------------------------ orthogonal blocks

TEST(RandomFeatures, OrthogonalBlocksAreOrthogonalAndIndependent) {
  const std::int64_t m = 40, d = 16;  // blocks of 16, 16 and 8 (the last truncated)
  const Tensor omega = draw_features(m, d, FeatureDraw::orthogonal, key_of(7, 2, 3, 0), DType::f64);
  ASSERT_EQ(omega.shape(), (Shape{m, d}));
  const auto w = omega.to_vector<double>();
  auto cosine = [&](std::int64_t i, std::int64_t j) {
    double ij = 0, ii = 0, jj = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      ij += w[i * d + c] * w[j * d + c];
      ii += w[i * d + c] * w[i * d + c];
      jj += w[j * d + c] * w[j * d + c];
    }
    return ij / std::sqrt(ii * jj);
  };
  double max_within = 0, max_across = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = i + 1; j < m; ++j) {
      const double c = std::abs(cosine(i, j));
      if (i / d == j / d) max_within = std::max(max_within, c);
      else max_across = std::max(max_across, c);
    }
  }
  std::printf("orthogonal m=40 d=16: max |cos| within blocks %.3g, across blocks %.3g\n", max_within,
              max_across);
  EXPECT_LT(max_within, 1e-10);
  // Independent blocks are not orthogonal to each other: 640 cross pairs of random unit vectors
  // in R^16 (|cos| has sd 1/4) all below 0.05 has probability far below 1e-100.
  EXPECT_GT(max_across, 0.05);

  // sqrt_d norms: every row has norm exactly sqrt(d).
  const auto s = draw_features(m, d, FeatureDraw::orthogonal, key_of(7, 2, 3, 0), DType::f64,
                               FeatureNorms::sqrt_d)
                     .to_vector<double>();
  for (std::int64_t i = 0; i < m; ++i) {
    double n2 = 0;
    for (std::int64_t c = 0; c < d; ++c) n2 += s[i * d + c] * s[i * d + c];
    EXPECT_NEAR(n2, static_cast<double>(d), 1e-10) << "row " << i;
  }
}

TEST(RandomFeatures, OrthogonalRowNormsAreChi) {
  // 500 draws x 64 rows = 32000 squared norms, chi^2_16: mean d, variance 2d, 4th central
  // moment 12 d (d + 4). Bounds: 4 standard errors, sqrt(2d / N) for the mean and
  // sqrt((12 d (d + 4) - (2d)^2) / N) for the variance.
  const std::int64_t m = 64, d = 16, draws = 500;
  std::vector<double> sq;
  for (std::int64_t e = 0; e < draws; ++e) {
    const auto w = draw_features(m, d, FeatureDraw::orthogonal, key_of(11, 0, 1, e), DType::f64)
                       .to_vector<double>();
    for (std::int64_t i = 0; i < m; ++i) {
      double n2 = 0;
      for (std::int64_t c = 0; c < d; ++c) n2 += w[i * d + c] * w[i * d + c];
      sq.push_back(n2);
    }
  }
  const Stats s = stats_of(sq);
  const double n = static_cast<double>(sq.size()), dd = static_cast<double>(d);
  const double mean_se = std::sqrt(2 * dd / n);
  const double var_se = std::sqrt((12 * dd * (dd + 4) - 4 * dd * dd) / n);
  std::printf("chi norms: mean |w|^2 %.4f (d = 16, se %.4f), var %.3f (2d = 32, se %.3f)\n", s.mean,
              mean_se, s.var, var_se);
  EXPECT_NEAR(s.mean, dd, 4 * mean_se);
  EXPECT_NEAR(s.var, 2 * dd, 4 * var_se);
}

TEST(RandomFeatures, HouseholderQIsTheUniqueQrFactor) {
  // Q^T A must be upper triangular with a positive diagonal (R of the unique QR), Q orthogonal.
  const std::int64_t d = 12;
  const auto a = Tensor::randn({d, d}, 5, 9, DType::f64).to_vector<double>();
  std::vector<double> q = a;
  attention::householder_q(q, d);
  for (std::int64_t i = 0; i < d; ++i) {
    for (std::int64_t j = 0; j < d; ++j) {
      double qtq = 0, r = 0;
      for (std::int64_t t = 0; t < d; ++t) {
        qtq += q[t * d + i] * q[t * d + j];
        r += q[t * d + i] * a[t * d + j];
      }
      EXPECT_NEAR(qtq, i == j ? 1.0 : 0.0, 1e-13) << i << "," << j;
      if (i > j) EXPECT_NEAR(r, 0.0, 1e-12) << "R below the diagonal at " << i << "," << j;
      if (i == j) EXPECT_GT(r, 0.0) << "R diagonal at " << i;
    }
  }
}

TEST(RandomFeatures, SignCorrectionMakesBlocksHaar) {
  // 4000 blocks of d = 8 (sqrt_d norms, so block / sqrt(d) is Q itself). For Haar Q,
  // E[Q_ii] = 0, tr(Q) has variance 1, so the per-block mean diagonal t = tr(Q) / d has sd 1/d.
  // Bound: 4 standard errors of the mean of t, estimated from the 4000 blocks.
  const std::int64_t d = 8, blocks = 4000;
  std::vector<double> corrected, uncorrected;
  double q00_sq = 0;
  for (std::int64_t e = 0; e < blocks; ++e) {
    const FeatureKey key = key_of(3, 1, 0, e);
    const auto w = draw_features(d, d, FeatureDraw::orthogonal, key, DType::f64, FeatureNorms::sqrt_d)
                       .to_vector<double>();
    double t = 0;
    for (std::int64_t i = 0; i < d; ++i) t += w[i * d + i] / std::sqrt(static_cast<double>(d));
    corrected.push_back(t / d);
    q00_sq += w[0] * w[0] / d;
    // The same Gaussian block (the documented stream), orthogonalised without the correction.
    auto g = Tensor::randn({d, d}, key.seed,
                           attention::feature_stream(key, attention::FeatureStream::gaussian), DType::f64)
                 .to_vector<double>();
    std::vector<double> plain = g;
    attention::householder_q(plain, d, /*sign_correction=*/false);
    double tp = 0;
    for (std::int64_t i = 0; i < d; ++i) tp += plain[i * d + i];
    uncorrected.push_back(tp / d);
    if (e == 0) {
      // draw_features' block is the corrected Q transposed, times sqrt(d).
      attention::householder_q(g, d);
      for (std::int64_t i = 0; i < d; ++i)
        for (std::int64_t j = 0; j < d; ++j)
          EXPECT_NEAR(w[i * d + j], g[j * d + i] * std::sqrt(static_cast<double>(d)), 1e-14);
    }
  }
  const Stats c = stats_of(corrected), u = stats_of(uncorrected);
  std::printf("mean diag(Q) over %lld blocks (d = 8): corrected %.5f (se %.5f, sd %.4f vs 1/d = %.4f), "
              "uncorrected %.4f (se %.5f); E[Q_00^2] %.4f (1/d = %.4f)\n",
              static_cast<long long>(blocks), c.mean, c.se, std::sqrt(c.var), 1.0 / d, u.mean, u.se,
              q00_sq / blocks, 1.0 / d);
  EXPECT_LT(std::abs(c.mean), 4 * c.se);
  // Without the correction the diagonal is strongly biased (Householder makes R_jj < 0 for a
  // positive pivot): far more than 4 standard errors from 0.
  EXPECT_GT(std::abs(u.mean), 20 * u.se);
  // E[Q_00^2] = 1/d: Q_00^2 ~ Beta(1/2, (d-1)/2), sd sqrt(2(d-1) / (d^2 (d+2))) = 0.118 per
  // block; 4 standard errors over 4000 blocks = 0.0075.
  EXPECT_NEAR(q00_sq / blocks, 1.0 / d, 0.0075);
}

TEST(RandomFeatures, DrawsAreKeyedAndDeterministic) {
  const std::int64_t m = 24, d = 8;
  for (FeatureDraw draw : {FeatureDraw::iid, FeatureDraw::orthogonal}) {
    const auto base = draw_features(m, d, draw, key_of(1, 2, 3, 4)).to_vector<float>();
    EXPECT_EQ(base, draw_features(m, d, draw, key_of(1, 2, 3, 4)).to_vector<float>());
    for (const FeatureKey& other : {key_of(2, 2, 3, 4), key_of(1, 3, 3, 4), key_of(1, 2, 4, 4),
                                    key_of(1, 2, 3, 5)}) {
      const auto w = draw_features(m, d, draw, other).to_vector<float>();
      int equal = 0;
      for (std::size_t i = 0; i < w.size(); ++i) equal += w[i] == base[i];
      EXPECT_EQ(equal, 0) << "entries shared with another (seed, layer, head, epoch)";
    }
    // f32 is the f64 draw rounded once.
    const auto wide = draw_features(m, d, draw, key_of(1, 2, 3, 4), DType::f64).to_vector<double>();
    for (std::size_t i = 0; i < wide.size(); ++i) EXPECT_EQ(base[i], static_cast<float>(wide[i]));
    const Tensor half = draw_features(m, d, draw, key_of(1, 2, 3, 4), DType::bf16);
    EXPECT_EQ(half.dtype(), DType::bf16);
  }
  // iid entries are exactly the documented Philox stream.
  const FeatureKey key = key_of(9, 5, 6, 7);
  EXPECT_EQ(attention::feature_stream(key, attention::FeatureStream::gaussian),
            (std::uint64_t{1} << 63) | (std::uint64_t{5} << 46) | (std::uint64_t{6} << 32) | 7u);
  EXPECT_EQ(draw_features(m, d, FeatureDraw::iid, key, DType::f64).to_vector<double>(),
            Tensor::randn({m, d}, 9, attention::feature_stream(key, attention::FeatureStream::gaussian),
                          DType::f64)
                .to_vector<double>());
  EXPECT_THROW(draw_features(m, d, FeatureDraw::iid, key_of(0, 1 << 14, 0, 0)), Error);
  EXPECT_THROW(draw_features(m, d, FeatureDraw::iid, key_of(0, 0, -1, 0)), Error);
  EXPECT_THROW(draw_features(m, d, FeatureDraw::iid, key_of(0, 0, 0, std::int64_t{1} << 32)), Error);
}

// ------------------------------------------------------------------ logits

TEST(RandomFeatures, FavorLogitsMatchNaiveLoopsAndGradcheck) {
  const std::int64_t m = 5, d = 4;
  const Tensor x = mul_scalar(Tensor::randn({2, 3, d}, 21, 0, DType::f64), 0.5);
  const Tensor omega = draw_features(m, d, FeatureDraw::orthogonal, key_of(4, 0, 0, 0), DType::f64);
  const Tensor logits = favor_logits(x, omega);
  ASSERT_EQ(logits.shape(), (Shape{2, 3, m}));
  const auto xv = x.to_vector<double>(), wv = omega.to_vector<double>(), lv = logits.to_vector<double>();
  for (std::int64_t n = 0; n < 6; ++n) {
    double sq = 0;
    for (std::int64_t c = 0; c < d; ++c) sq += xv[n * d + c] * xv[n * d + c];
    for (std::int64_t j = 0; j < m; ++j) {
      double p = 0;
      for (std::int64_t c = 0; c < d; ++c) p += wv[j * d + c] * xv[n * d + c];
      EXPECT_NEAR(lv[n * m + j], p - sq / 2 - std::log(static_cast<double>(m)) / 2, 1e-14);
    }
  }
  // Gradients reach x and (LFK) omega.
  Tensor xg = x.clone(), wg = omega.clone();
  xg.set_requires_grad();
  wg.set_requires_grad();
  const GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) { return exp(favor_logits(in[0], in[1])); }, {xg, wg});
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_THROW(favor_logits(Tensor::zeros({3, d + 1}, DType::f64), omega), Error);
  EXPECT_THROW(favor_logits(Tensor::zeros({3, d}, DType::f32), omega), Error);
}

// ------------------------------------------------------------------ unbiasedness

// Mean over `draws` redraws (epochs) of phi(x) . phi(y) with m features.
Stats estimate_over_draws(const Tensor& x, const Tensor& y, std::int64_t m, std::int64_t d,
                          FeatureDraw draw, std::int64_t draws, std::uint64_t seed) {
  std::vector<double> est;
  est.reserve(draws);
  for (std::int64_t e = 0; e < draws; ++e)
    est.push_back(favor_estimate(x, y, draw_features(m, d, draw, key_of(seed, 0, 0, e), DType::f64)));
  return stats_of(est);
}

TEST(RandomFeatures, FavorIsUnbiasedForTheSoftmaxKernel) {
  // 2000 draws of m = 16 features, d = 16, q~ and k~ entries N(0, 0.3^2). Bound: 4 standard
  // errors of the mean, estimated from the 2000 draws.
  const std::int64_t d = 16, m = 16, draws = 2000;
  const Tensor q = mul_scalar(Tensor::randn({1, d}, 31, 0, DType::f64), 0.3);
  const Tensor k = mul_scalar(Tensor::randn({1, d}, 31, 1, DType::f64), 0.3);
  const double exact = std::exp(dot(q.to_vector<double>(), k.to_vector<double>()));
  for (FeatureDraw draw : {FeatureDraw::iid, FeatureDraw::orthogonal}) {
    const Stats s = estimate_over_draws(q, k, m, d, draw, draws, 100);
    std::printf("FAVOR+ %s: mean %.5f vs exp(q.k) %.5f, se %.5f (%.2f se)\n",
                draw == FeatureDraw::iid ? "iid" : "orthogonal", s.mean, exact, s.se,
                (s.mean - exact) / s.se);
    EXPECT_NEAR(s.mean, exact, 4 * s.se);
  }
}

TEST(RandomFeatures, DarkformerIsUnbiasedForTheDataAlignedKernel) {
  // phi_Sigma(x) = exp(favor_logits(M x, G)) estimates exp(q^T M^T M k). 2000 draws of m = 16,
  // d = 16; M has N(0, 1/d) entries. Bound: 4 standard errors estimated from the draws.
  const std::int64_t d = 16, m = 16, draws = 2000;
  const Tensor q = mul_scalar(Tensor::randn({1, d}, 41, 0, DType::f64), 0.3);
  const Tensor k = mul_scalar(Tensor::randn({1, d}, 41, 1, DType::f64), 0.3);
  const Tensor mm = mul_scalar(Tensor::randn({d, d}, 41, 2, DType::f64), 1.0 / std::sqrt(double(d)));
  // Row vectors: (M x)^T = x^T M^T.
  const Tensor mq = matmul(q, mm, false, true), mk = matmul(k, mm, false, true);
  // The target by naive loops: q^T M^T M k.
  const auto qv = q.to_vector<double>(), kv = k.to_vector<double>(), mv = mm.to_vector<double>();
  double qsk = 0;
  for (std::int64_t r = 0; r < d; ++r) {
    double a = 0, b = 0;
    for (std::int64_t c = 0; c < d; ++c) a += mv[r * d + c] * qv[c], b += mv[r * d + c] * kv[c];
    qsk += a * b;
  }
  const double exact = std::exp(qsk);
  for (FeatureDraw draw : {FeatureDraw::iid, FeatureDraw::orthogonal}) {
    const Stats s = estimate_over_draws(mq, mk, m, d, draw, draws, 200);
    std::printf("DARKFormer %s: mean %.5f vs exp(q^T Sigma k) %.5f, se %.5f (%.2f se)\n",
                draw == FeatureDraw::iid ? "iid" : "orthogonal", s.mean, exact, s.se,
                (s.mean - exact) / s.se);
    EXPECT_NEAR(s.mean, exact, 4 * s.se);
  }
}

// ------------------------------------------------------------------ variance

TEST(RandomFeatures, SingleFeatureRelativeVarianceIsExpNormSumMinusOne) {
  // 200000 single iid features (one draw of Omega with 200000 rows; each row is one
  // independent one-feature estimate). The relative estimate R = phi(a) phi(b) / exp(a.b) has
  // variance exp(|a + b|^2) - 1. Bound: 4 standard errors of the sample variance,
  // sqrt((mu4 - var^2) / N) with mu4 the sample 4th central moment.
  const std::int64_t d = 8, n = 200000;
  const Tensor omega = draw_features(n, d, FeatureDraw::iid, key_of(77, 0, 0, 0), DType::f64);
  const std::vector<std::pair<double, double>> scales = {{0.15, 0.2}, {0.3, 0.25}};
  for (std::size_t p = 0; p < scales.size(); ++p) {
    const Tensor a = mul_scalar(Tensor::randn({1, d}, 78, 2 * p, DType::f64), scales[p].first);
    const Tensor b = mul_scalar(Tensor::randn({1, d}, 78, 2 * p + 1, DType::f64), scales[p].second);
    const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
    const auto la = favor_logits(a, omega).to_vector<double>();
    const auto lb = favor_logits(b, omega).to_vector<double>();
    const double log_m = std::log(static_cast<double>(n));  // undo the two ln(n)/2 offsets
    const double kernel = std::exp(dot(av, bv));
    std::vector<double> rel(n);
    for (std::int64_t i = 0; i < n; ++i) rel[i] = std::exp(la[i] + lb[i] + log_m) / kernel;
    std::vector<double> sum(d);
    for (std::int64_t c = 0; c < d; ++c) sum[c] = av[c] + bv[c];
    const double expected = std::exp(dot(sum, sum)) - 1;
    const Stats s = stats_of(rel);
    const double se = variance_se(s, rel.size());
    std::printf("one feature, |a+b|^2 = %.4f: rel. variance %.5f vs exp(|a+b|^2)-1 = %.5f, se %.5f "
                "(%.2f se); mean %.5f (se %.5f)\n",
                dot(sum, sum), s.var, expected, se, (s.var - expected) / se, s.mean, s.se);
    EXPECT_NEAR(s.var, expected, 4 * se);
    EXPECT_NEAR(s.mean, 1.0, 4 * s.se);
  }
}

TEST(RandomFeatures, OrthogonalFeaturesHaveLowerVarianceThanIid) {
  // m = d = 16, 10000 draws each of the m-feature estimate for one fixed pair with
  // |a + b|^2 = 1.32. iid relative variance is (exp(|a+b|^2) - 1) / m (checked within 4
  // standard errors of the sample variance, sqrt((mu4 - var^2) / N)); orthogonal must be below
  // 0.85 x iid (measured about 0.74), and the gap must exceed 4 combined standard errors.
  const std::int64_t d = 16, m = 16, draws = 10000;
  const Tensor a = mul_scalar(Tensor::randn({1, d}, 51, 0, DType::f64), 0.35);
  const Tensor b = mul_scalar(Tensor::randn({1, d}, 51, 1, DType::f64), 0.35);
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  const double kernel = std::exp(dot(av, bv));
  std::vector<double> sum(d);
  for (std::int64_t c = 0; c < d; ++c) sum[c] = av[c] + bv[c];
  const double iid_theory = (std::exp(dot(sum, sum)) - 1) / m;
  auto relative = [&](FeatureDraw draw) {
    std::vector<double> rel;
    for (std::int64_t e = 0; e < draws; ++e)
      rel.push_back(favor_estimate(a, b, draw_features(m, d, draw, key_of(300, 1, 1, e), DType::f64)) /
                    kernel);
    return rel;
  };
  const auto ri = relative(FeatureDraw::iid), ro = relative(FeatureDraw::orthogonal);
  const Stats si = stats_of(ri), so = stats_of(ro);
  const double sei = variance_se(si, ri.size()), seo = variance_se(so, ro.size());
  std::printf("m = d = 16, |a+b|^2 = %.3f: rel. variance iid %.5f (se %.5f, theory %.5f), "
              "orthogonal %.5f (se %.5f), ratio %.3f\n",
              dot(sum, sum), si.var, sei, iid_theory, so.var, seo, so.var / si.var);
  EXPECT_NEAR(si.var, iid_theory, 4 * sei);
  EXPECT_LT(so.var, 0.85 * si.var);
  EXPECT_GT(si.var - so.var, 4 * std::sqrt(sei * sei + seo * seo));
}

// ------------------------------------------------------------------ whitening

// Determinant by Gaussian elimination with partial pivoting (n x n, row-major).
double determinant(std::vector<double> a, std::int64_t n) {
  double det = 1;
  for (std::int64_t c = 0; c < n; ++c) {
    std::int64_t piv = c;
    for (std::int64_t r = c + 1; r < n; ++r)
      if (std::abs(a[r * n + c]) > std::abs(a[piv * n + c])) piv = r;
    if (a[piv * n + c] == 0) return 0;
    if (piv != c) {
      for (std::int64_t j = 0; j < n; ++j) std::swap(a[c * n + j], a[piv * n + j]);
      det = -det;
    }
    det *= a[c * n + c];
    for (std::int64_t r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / a[c * n + c];
      for (std::int64_t j = c; j < n; ++j) a[r * n + j] -= f * a[c * n + j];
    }
  }
  return det;
}

std::vector<double> matmul_nn(const std::vector<double>& a, const std::vector<double>& b, std::int64_t n) {
  std::vector<double> c(n * n, 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * n + t] * b[t * n + j];
  return c;
}

std::vector<double> transposed(const std::vector<double>& a, std::int64_t n) {
  std::vector<double> t(n * n);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) t[j * n + i] = a[i * n + j];
  return t;
}

TEST(RandomFeatures, WhiteningLowersVarianceOnAnisotropicData) {
  // d = 8, Lambda = U diag(lambda) U^T with lambda geometric from 0.01 to 0.2 and U Haar.
  // Closed form E[exp(|M(q+k)|^2)] = det(I - 4 M Lambda M^T)^(-1/2) for M = I and the whitened
  // M = sqrt(tr(Lambda)/d) Lambda^(-1/2); then 20000 sampled pairs (q, k) ~ N(0, Lambda) with
  // per-pair relative variance exp(|M(q+k)|^2) - 1 (mean and 99th percentile).
  const std::int64_t d = 8, pairs = 20000;
  std::vector<double> lambda(d);
  for (std::int64_t i = 0; i < d; ++i) lambda[i] = 0.01 * std::pow(20.0, i / double(d - 1));
  std::vector<double> u = Tensor::randn({d, d}, 61, 0, DType::f64).to_vector<double>();
  attention::householder_q(u, d);
  auto with_diag = [&](auto f) {  // U diag(f(lambda)) U^T
    std::vector<double> r(d * d, 0.0);
    for (std::int64_t i = 0; i < d; ++i)
      for (std::int64_t j = 0; j < d; ++j)
        for (std::int64_t t = 0; t < d; ++t) r[i * d + j] += u[i * d + t] * f(lambda[t]) * u[j * d + t];
    return r;
  };
  const std::vector<double> cov = with_diag([](double l) { return l; });
  double trace = 0;
  for (std::int64_t i = 0; i < d; ++i) trace += cov[i * d + i];
  const double c_over_d = trace / d;
  std::vector<double> identity(d * d, 0.0);
  for (std::int64_t i = 0; i < d; ++i) identity[i * d + i] = 1.0;
  const std::vector<double> whiten = with_diag([&](double l) { return std::sqrt(c_over_d / l); });

  auto closed_form = [&](const std::vector<double>& mm) {
    const std::vector<double> mlm = matmul_nn(matmul_nn(mm, cov, d), transposed(mm, d), d);
    std::vector<double> a(d * d);
    for (std::int64_t i = 0; i < d * d; ++i) a[i] = identity[i] - 4 * mlm[i];
    return 1.0 / std::sqrt(determinant(a, d));
  };
  const double e_identity = closed_form(identity), e_whiten = closed_form(whiten);
  // The same numbers from the eigenvalues: prod (1 - 4 lambda_i)^(-1/2) and (1 - 4 c/d)^(-d/2).
  double e_identity_eig = 1;
  for (double l : lambda) e_identity_eig /= std::sqrt(1 - 4 * l);
  const double e_whiten_eig = std::pow(1 - 4 * c_over_d, -0.5 * d);
  EXPECT_NEAR(e_identity, e_identity_eig, 1e-9 * e_identity_eig);
  EXPECT_NEAR(e_whiten, e_whiten_eig, 1e-9 * e_whiten_eig);
  EXPECT_LT(e_whiten, e_identity);

  // Sampled pairs: q = U diag(sqrt(lambda)) z.
  const std::vector<double> root = with_diag([](double l) { return std::sqrt(l); });
  const auto z = Tensor::randn({2 * pairs, d}, 62, 0, DType::f64).to_vector<double>();
  auto per_pair = [&](const std::vector<double>& mm) {
    std::vector<double> e(pairs);
    std::vector<double> s(d), ms(d);
    for (std::int64_t p = 0; p < pairs; ++p) {
      for (std::int64_t i = 0; i < d; ++i) {
        double v = 0;
        for (std::int64_t t = 0; t < d; ++t) v += root[i * d + t] * (z[2 * p * d + t] + z[(2 * p + 1) * d + t]);
        s[i] = v;  // q + k
      }
      for (std::int64_t i = 0; i < d; ++i) {
        double v = 0;
        for (std::int64_t t = 0; t < d; ++t) v += mm[i * d + t] * s[t];
        ms[i] = v;
      }
      e[p] = std::exp(dot(ms, ms));  // 1 + relative variance of one feature
    }
    return e;
  };
  const auto ei = per_pair(identity), ew = per_pair(whiten);
  auto p99 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(0.99 * (v.size() - 1))] - 1;
  };
  const Stats si = stats_of(ei), sw = stats_of(ew);
  std::printf("whitening d = 8, lambda 0.01..0.2: closed-form mean rel. variance I %.4f, whitened %.4f; "
              "sampled (20000 pairs) mean I %.4f, whitened %.4f (se %.4f); p99 I %.3f, whitened %.3f\n",
              e_identity - 1, e_whiten - 1, si.mean - 1, sw.mean - 1, sw.se, p99(ei), p99(ew));
  EXPECT_LT(sw.mean, si.mean);
  EXPECT_LT(p99(ew), p99(ei));
  // Whitened: M Lambda M^T = (c/d) I with 8 c/d < 1, so exp(|M(q+k)|^2) has finite variance and
  // the sampled mean must match the closed form within 4 standard errors. (For M = I the top
  // eigenvalue 0.2 > 1/8 makes that variance infinite: no standard error exists there.)
  ASSERT_LT(8 * c_over_d, 1.0);
  EXPECT_NEAR(sw.mean, e_whiten, 4 * sw.se);
}

}  // namespace
}  // namespace dark
