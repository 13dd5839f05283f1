// The exact window (attention/exact_window.h) against a naive float64 reference written from
// the definition (every pair's log weight, one normaliser per row, computed in log space so
// that no scale overflows), at several T, W, m, chunk sizes, grouped-query heads, key masks,
// and sliding-window layers; the two scale regimes (far keys dominate, near keys dominate) at
// magnitudes whose weights overflow float32 without offsets; W >= T equal to the kind's exact
// mode; W = 0 equal to the kind as it was; float64 gradchecks of q, k, v, DARKFormer's M and
// the features; decoding equal to the forward; the log normalisers of the ops it is built of;
// and the config rules.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attention/config.h"
#include "attention/exact_window.h"
#include "attention/factory.h"
#include "attention/random_feature_attention.h"
#include "autograd/gradcheck.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/test_util.h"

namespace dark::exact_window_test {
namespace {

using testing::expect_close;
using testing::mask_tensor;
using testing::Padding;
using testing::padding_mask;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Case {
  std::int64_t b, t, hq, hkv, r, m, dv, chunk, window, layer_window;
  bool weighted, masked;
  Padding padding = Padding::holes;
  std::string name() const {
    return "B" + std::to_string(b) + " T" + std::to_string(t) + " H" + std::to_string(hq) + "/" + std::to_string(hkv) +
           " r" + std::to_string(r) + " m" + std::to_string(m) + " chunk" + std::to_string(chunk) + " W" +
           std::to_string(window) + " w" + std::to_string(layer_window) + (weighted ? " weighted" : "") +
           (masked ? testing::padding_name(padding) : "");
  }
  // xq, xk, v, omega (f64, then dtype)
  std::vector<Tensor> inputs(DType dtype, double scale = 1.0) const {
    return {mul_scalar(Tensor::randn({b, t, hq, r}, 5, 0, DType::f64), 0.6 * scale).to(dtype),
            mul_scalar(Tensor::randn({b, t, hkv, r}, 5, 1, DType::f64), 0.6 * scale).to(dtype),
            Tensor::randn({b, t, hkv, dv}, 5, 2, DType::f64).to(dtype),
            mul_scalar(Tensor::randn({hkv, m, r}, 5, 3, DType::f64), 0.8).to(dtype)};
  }
  Tensor log_weight(DType dtype) const {
    return weighted ? mul_scalar(Tensor::randn({hkv, m}, 5, 4, DType::f64), 0.3).to(dtype) : Tensor();
  }
  std::vector<std::int32_t> real() const {
    return masked ? padding_mask(padding, b, t) : std::vector<std::int32_t>(b * t, 1);
  }
  Tensor mask() const { return masked ? mask_tensor(real(), b) : Tensor(); }
  attention::ExactWindowSpec spec(double eps = 1e-6) const { return {window, layer_window, eps, chunk}; }
};

// The feature logits of x (B, T, H, r) with omega (Hkv, m, r), from small ops.
Tensor logits_of(const Tensor& x, const Tensor& omega, const Tensor& log_weight) {
  const std::int64_t m = omega.size(1);
  const Tensor shift = add_scalar(mul_scalar(sum(square(x), {3}, true), 0.5), 0.5 * std::log(static_cast<double>(m)));
  Tensor l = sub(attention::per_head_project(x, omega, omega.size(0)), shift);
  if (log_weight.defined()) {
    const std::int64_t hkv = omega.size(0), group = x.size(2) / hkv;
    l = add(l, reshape(expand(reshape(log_weight, {hkv, 1, m}), {hkv, group, m}), {1, 1, x.size(2), m}));
  }
  return l;
}

Tensor run_op(const Case& c, const std::vector<Tensor>& x, DType dtype, double eps = 1e-6, const Tensor& far_bias = Tensor()) {
  const Tensor lw = c.log_weight(dtype);
  return attention::exact_window_attention(x[0], x[1], x[2], x[3], lw, c.mask(), c.spec(eps),
                                           [&](const Tensor& y) { return logits_of(y, x[3], lw); }, far_bias);
}

// The definition, pair by pair, in float64 and log space; far_bias (one per query head, or
// none): the far keys' weights (and the eps guard that belongs to them) times exp(far_bias[h]).
Tensor naive(const Case& c, const std::vector<Tensor>& in, double eps, const std::vector<double>& far_bias = {}) {
  const std::vector<double> xq = testing::values(in[0]), xk = testing::values(in[1]), v = testing::values(in[2]),
                            om = testing::values(in[3]);
  const Tensor lw_t = c.log_weight(DType::f64);
  const std::vector<double> lw = lw_t.defined() ? testing::values(lw_t) : std::vector<double>(c.hkv * c.m, 0.0);
  const std::vector<std::int32_t> real = c.real();
  const std::int64_t group = c.hq / c.hkv;
  auto logits = [&](const double* x, std::int64_t kv) {
    double ss = 0;
    for (std::int64_t i = 0; i < c.r; ++i) ss += x[i] * x[i];
    std::vector<double> l(c.m);
    for (std::int64_t f = 0; f < c.m; ++f) {
      double dot = 0;
      for (std::int64_t i = 0; i < c.r; ++i) dot += om[(kv * c.m + f) * c.r + i] * x[i];
      l[f] = dot - ss / 2 - std::log(static_cast<double>(c.m)) / 2 + lw[kv * c.m + f];
    }
    return l;
  };
  auto max_of = [](const std::vector<double>& l) {
    double mx = kNegInf;
    for (double x : l) mx = std::max(mx, x);
    return mx;
  };
  std::vector<double> out(c.b * c.t * c.hq * c.dv, 0.0);
  for (std::int64_t b = 0; b < c.b; ++b)
    for (std::int64_t h = 0; h < c.hq; ++h) {
      const std::int64_t kv = h / group;
      for (std::int64_t t = 0; t < c.t; ++t) {
        const double* q = &xq[((b * c.t + t) * c.hq + h) * c.r];
        const std::vector<double> lq = logits(q, kv);
        std::vector<double> logw;
        std::vector<std::int64_t> keys;
        double far_offset = kNegInf;
        for (std::int64_t j = 0; j <= t; ++j) {
          if (!real[b * c.t + j] || (c.layer_window > 0 && j <= t - c.layer_window)) continue;
          const double* k = &xk[((b * c.t + j) * c.hkv + kv) * c.r];
          if (j > t - c.window) {  // near: the exact kernel
            double dot = 0;
            for (std::int64_t i = 0; i < c.r; ++i) dot += q[i] * k[i];
            logw.push_back(dot);
          } else {  // far: phi(q) . phi(k)
            const std::vector<double> lk = logits(k, kv);
            far_offset = std::max(far_offset, max_of(lk));
            double mx = kNegInf;
            for (std::int64_t f = 0; f < c.m; ++f) mx = std::max(mx, lq[f] + lk[f]);
            double s = 0;
            for (std::int64_t f = 0; f < c.m; ++f) s += std::exp(lq[f] + lk[f] - mx);
            logw.push_back(mx + std::log(s) + (far_bias.empty() ? 0.0 : far_bias[h]));
          }
          keys.push_back(j);
        }
        if (keys.empty()) continue;
        // eps in the far part's offset units: eps exp(qoff + o_far)
        const double log_eps = far_offset == kNegInf ? kNegInf
                                                     : std::log(eps) + max_of(lq) + far_offset +
                                                           (far_bias.empty() ? 0.0 : far_bias[h]);
        double top = log_eps;
        for (double w : logw) top = std::max(top, w);
        double den = log_eps == kNegInf ? 0.0 : std::exp(log_eps - top);
        std::vector<double> num(c.dv, 0.0);
        for (std::size_t i = 0; i < keys.size(); ++i) {
          const double w = std::exp(logw[i] - top);
          den += w;
          for (std::int64_t d = 0; d < c.dv; ++d) num[d] += w * v[((b * c.t + keys[i]) * c.hkv + kv) * c.dv + d];
        }
        for (std::int64_t d = 0; d < c.dv; ++d) out[((b * c.t + t) * c.hq + h) * c.dv + d] = num[d] / den;
      }
    }
  return Tensor::from_vector(out, {c.b, c.t, c.hq, c.dv});
}

const Case kCases[] = {
    // b, t, hq, hkv, r, m, dv, chunk, W, w, weighted, masked, padding
    {2, 37, 4, 2, 6, 8, 6, 8, 5, 0, false, false},
    {1, 50, 2, 1, 5, 12, 7, 16, 16, 0, true, true, Padding::holes},
    {2, 41, 3, 3, 8, 16, 8, 64, 9, 0, false, true, Padding::left},
    {1, 64, 2, 1, 4, 6, 4, 8, 1, 0, false, false},
    {2, 45, 2, 1, 4, 8, 5, 8, 6, 20, true, true, Padding::right},  // a sliding-window layer
    {1, 40, 4, 2, 6, 8, 6, 16, 7, 12, false, false},
    {1, 30, 2, 2, 4, 8, 4, 8, 10, 8, false, false},  // layer window <= W: exact over the layer window
};

TEST(ExactWindow, MatchesTheDefinition) {
  for (const Case& c : kCases)
    for (DType dtype : {DType::f64, DType::f32}) {
      const std::vector<Tensor> in = c.inputs(dtype);
      const double tol = dtype == DType::f64 ? 1e-11 : 3e-5;
      expect_close(run_op(c, in, dtype), naive(c, in, 1e-6), tol, tol, c.name() + " " + dtype_name(dtype));
    }
}

// Far keys aligned with every query and near keys orthogonal (the far part dominates), then
// the reverse, at |q~ . k~| = 121: exp(121) overflows float32, so only matched offsets keep
// either regime finite and right.
TEST(ExactWindow, ScalesOfTheTwoPartsMatchWhereEitherDominates) {
  const Case c{1, 24, 2, 1, 4, 4, 4, 8, 6, 0, false, false};
  for (bool far_dominates : {true, false})
    for (DType dtype : {DType::f64, DType::f32}) {
      std::vector<double> q(c.t * c.hq * c.r, 0.0), k(c.t * c.r, 0.0), om(c.m * c.r, 0.0);
      for (std::int64_t t = 0; t < c.t; ++t) {
        for (std::int64_t h = 0; h < c.hq; ++h) q[(t * c.hq + h) * c.r] = 11.0;
        // aligned keys where that part's keys are for the late queries (t >= 18): the far part
        // is j <= 11 for them, the near part j >= 12 (W = 6 covers 13..18 for t = 18)
        const bool aligned = far_dominates ? t < 12 : t >= 12;
        k[t * c.r + (aligned ? 0 : 1)] = aligned ? 11.0 : 0.5;
      }
      for (std::int64_t f = 0; f < c.m; ++f) {
        om[f * c.r] = 2.0 + 0.1 * static_cast<double>(f);  // features that see the aligned direction
        om[f * c.r + 1 + f % 3] = 0.3;
      }
      const std::vector<Tensor> in{Tensor::from_vector(q, {1, c.t, c.hq, c.r}).to(dtype),
                                   Tensor::from_vector(k, {1, c.t, 1, c.r}).to(dtype),
                                   Tensor::randn({1, c.t, 1, c.dv}, 7, 0, DType::f64).to(dtype),
                                   Tensor::from_vector(om, {1, c.m, c.r}).to(dtype)};
      const Tensor got = run_op(c, in, dtype), want = naive(c, in, 1e-6);
      const std::vector<double> g = testing::values(got);
      for (double x : g) ASSERT_TRUE(std::isfinite(x)) << (far_dominates ? "far" : "near") << " dominates";
      const double tol = dtype == DType::f64 ? 1e-10 : 1e-4;
      expect_close(got, want, tol, tol,
                   std::string(far_dominates ? "far part dominates " : "near part dominates ") + dtype_name(dtype));
    }
}

nn::AttentionShape shape_of(const Case& c, std::int64_t head_dim) {
  nn::AttentionShape s;
  s.n_heads = c.hq;
  s.n_kv_heads = c.hkv;
  s.head_dim = head_dim;
  s.layer = 1;
  s.dtype = DType::f64;
  s.window = c.layer_window;
  return s;
}

attention::AttentionConfig kind_config(attention::Kind kind, std::int64_t m, int window) {
  attention::AttentionConfig a;
  a.kind = kind;
  a.num_features = static_cast<int>(m);
  a.seed = 11;
  a.chunk_size = 8;
  a.exact_window = window;
  return a;
}

// q, k, v (B, T, H, d) for the kernels' forward.
std::vector<Tensor> head_inputs(const Case& c, std::int64_t d) {
  return {Tensor::randn({c.b, c.t, c.hq, d}, 8, 0, DType::f64), Tensor::randn({c.b, c.t, c.hkv, d}, 8, 1, DType::f64),
          Tensor::randn({c.b, c.t, c.hkv, d}, 8, 2, DType::f64)};
}

TEST(ExactWindow, WindowCoveringTheSequenceIsTheKindsExactAttention) {
  const Case c{2, 19, 4, 2, 8, 8, 8, 8, 19, 0, false, true, Padding::left};
  const std::vector<Tensor> x = head_inputs(c, 8);
  for (attention::Kind kind : {attention::Kind::performer, attention::Kind::lfk, attention::Kind::darkformer}) {
    auto windowed = attention::make_factory(kind_config(kind, 8, 19))(shape_of(c, 8));
    attention::AttentionConfig exact_config = kind_config(kind == attention::Kind::lfk ? attention::Kind::performer : kind, 8, 0);
    exact_config.mode = attention::Mode::exact;  // lfk's kernel is softmax's: performer's exact mode
    auto exact = attention::make_factory(exact_config)(shape_of(c, 8));
    const Tensor got = windowed->forward(x[0], x[1], x[2], c.mask());
    const Tensor want = exact->forward(x[0], x[1], x[2], c.mask());
    expect_close(got, want, 1e-12, 1e-12, std::string("W >= T, ") + windowed->kind());
  }
  // ... and softmax itself, for performer: exp(q~ . k~) = exp(q . k / sqrt(d))
  auto windowed = attention::make_factory(kind_config(attention::Kind::performer, 8, 40))(shape_of(c, 8));
  const Tensor softmax = flash_attention(x[0], x[1], x[2], true, 1.0 / std::sqrt(8.0), c.mask());
  expect_close(windowed->forward(x[0], x[1], x[2], c.mask()), softmax, 1e-12, 1e-12, "W >= T against softmax");
}

TEST(ExactWindow, ZeroWindowIsTheKindAsItWas) {
  const Case c{2, 33, 4, 2, 8, 8, 8, 8, 0, 0, false, true, Padding::holes};
  const std::vector<Tensor> x = head_inputs(c, 8);
  auto kernel = attention::make_factory(kind_config(attention::Kind::performer, 8, 0))(shape_of(c, 8));
  auto& rf = dynamic_cast<attention::RandomFeatureAttention&>(*kernel);
  const Tensor got = kernel->forward(x[0], x[1], x[2], c.mask());
  // The kind's definition on its own feature logits.
  const Tensor want = linear_attention(rf.feature_logits(rf.transformed(x[0])), rf.feature_logits(rf.transformed(x[1])),
                                       x[2], true, 1e-6, 8, c.mask());
  expect_close(got, want, 1e-12, 1e-12, "W = 0");
}

// q, k (B, T, H, d) and M (Hkv, r, d) -> the DARKFormer transform, then the exact window: the
// gradients of q, k, v, M and omega against finite differences. eps is tiny: the offsets
// carry no gradient and cancel except through eps (as in linear_attention's gradcheck).
TEST(ExactWindow, GradcheckOfQueriesKeysValuesTransformAndFeatures) {
  for (const Case& c : {Case{1, 13, 2, 1, 3, 4, 4, 4, 4, 0, true, true, Padding::holes},
                        Case{1, 14, 2, 2, 3, 4, 3, 4, 3, 7, false, false}}) {
    const std::int64_t d = 4;
    std::vector<Tensor> in{mul_scalar(Tensor::randn({c.b, c.t, c.hq, d}, 9, 0, DType::f64), 0.5),
                           mul_scalar(Tensor::randn({c.b, c.t, c.hkv, d}, 9, 1, DType::f64), 0.5),
                           Tensor::randn({c.b, c.t, c.hkv, c.dv}, 9, 2, DType::f64),
                           Tensor::randn({c.hkv, c.r, d}, 9, 3, DType::f64),
                           mul_scalar(Tensor::randn({c.hkv, c.m, c.r}, 9, 4, DType::f64), 0.7)};
    for (Tensor& t : in) t.set_requires_grad(true);
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& x) {
          const Tensor xq = attention::per_head_project(x[0], x[3], c.hkv);
          const Tensor xk = attention::per_head_project(x[1], x[3], c.hkv);
          const Tensor lw = c.log_weight(DType::f64);
          return attention::exact_window_attention(xq, xk, x[2], x[4], lw, c.mask(), c.spec(1e-12),
                                                   [&](const Tensor& y) { return logits_of(y, x[4], lw); });
        },
        in);
    EXPECT_TRUE(r.ok) << c.name() << ": " << r.report;
  }
}

// On global layers the window is one tape entry that differentiates no merge: its output and
// the gradients of x_q, x_k, v and omega equal those of the composition of differentiable ops.
TEST(ExactWindow, TheGlobalLayersOpEqualsTheComposition) {
  for (const Case& c : {Case{2, 37, 4, 2, 6, 8, 6, 8, 5, 0, true, true, Padding::left},
                        Case{1, 50, 2, 1, 5, 12, 7, 16, 16, 0, false, true, Padding::holes}})
    for (DType dtype : {DType::f64, DType::f32}) {
      const std::vector<Tensor> in = c.inputs(dtype);
      const Tensor lw = c.log_weight(dtype);
      auto run = [&](bool fused) {
        std::vector<Tensor> leaves;
        for (const Tensor& x : in) leaves.push_back(x.detach().set_requires_grad(true));
        Tensor out;
        if (fused) {
          out = random_feature_attention_exact_window(leaves[0], leaves[1], leaves[2], leaves[3], lw, c.window, 1e-6,
                                                      c.chunk, c.mask());
        } else {
          const NormalizedAttention near = flash_attention_with_lse(
              pad_last_dim(leaves[0], c.dv), pad_last_dim(leaves[1], c.dv), leaves[2], true, 1.0,
              c.mask(), c.window);
          const std::int64_t n = c.t - c.window;
          const Tensor mask = c.mask();
          const NormalizedAttention shifted = random_feature_attention_with_norm(
              slice(leaves[0], 1, c.window, c.t), slice(leaves[1], 1, 0, n), slice(leaves[2], 1, 0, n), leaves[3], lw,
              true, 1e-6, c.chunk, mask.defined() ? slice(mask, 1, 0, n) : Tensor());
          const NormalizedAttention far{
              concat({Tensor::zeros({c.b, c.window, c.hq, c.dv}, dtype), shifted.out}, 1),
              concat({Tensor::full({c.b, c.hq, c.window}, kNegInf, grad_dtype(dtype)), shifted.log_norm}, 2)};
          out = merge_attention(near, far);
        }
        backward(out, Tensor::randn(out.shape(), 12, 0, DType::f64).to(dtype));
        std::vector<Tensor> r{out.detach()};
        for (const Tensor& l : leaves) r.push_back(l.grad());
        return r;
      };
      const std::vector<Tensor> fused = run(true), composed = run(false);
      const double tol = dtype == DType::f64 ? 1e-11 : 2e-5;
      const char* names[] = {"out", "d x_q", "d x_k", "d v", "d omega"};
      for (int i = 0; i < 5; ++i)
        expect_close(fused[i], composed[i], tol, tol, c.name() + " " + dtype_name(dtype) + " " + names[i]);
    }
}

// One position at a time through exact_window_decode equals the forward of the whole sequence.
// attention.window_balance: a per-head bias b on the far part's log normaliser weighs the far
// keys (and their eps guard) by exp(b_h), on global and sliding-window layers, in the forward,
// in decoding and in the gradients (b's included); b = 0 is the window as it was.
TEST(ExactWindow, AFarBiasWeighsTheFarKeys) {
  for (const Case& c : {kCases[0], kCases[1], kCases[4], kCases[5]})
    for (DType dtype : {DType::f64, DType::f32}) {
      const std::vector<Tensor> in = c.inputs(dtype);
      std::vector<double> bias(static_cast<std::size_t>(c.hq));
      for (std::int64_t h = 0; h < c.hq; ++h) bias[h] = 0.7 * static_cast<double>(h) - 0.9;
      const Tensor b = Tensor::from_vector(bias, {c.hq}).to(dtype);
      const double tol = dtype == DType::f64 ? 1e-11 : 3e-5;
      expect_close(run_op(c, in, dtype, 1e-6, b), naive(c, in, 1e-6, bias), tol, tol, "bias " + c.name());
      expect_close(run_op(c, in, dtype, 1e-6, Tensor::zeros({c.hq}, dtype)), naive(c, in, 1e-6), tol, tol,
                   "zero bias " + c.name());
      if (c.masked) continue;  // decoding has no padding
      const Tensor lw = c.log_weight(dtype);
      const Tensor lq = logits_of(in[0], in[3], lw), lk = logits_of(in[1], in[3], lw);
      std::unique_ptr<nn::DecodeState> state;
      std::vector<Tensor> steps;
      for (std::int64_t t = 0; t < c.t; ++t) {
        auto at = [&](const Tensor& x) { return slice(x, 1, t, t + 1); };
        steps.push_back(attention::exact_window_decode(at(in[0]), at(in[1]), at(lq), at(lk), at(in[2]), c.spec(), state, b));
      }
      expect_close(concat(steps, 1), naive(c, in, 1e-6, bias), tol, tol, "bias decode " + c.name());
    }
  const Case c{1, 13, 2, 1, 3, 4, 4, 4, 4, 0, false, false};
  std::vector<Tensor> in = c.inputs(DType::f64);
  in.push_back(Tensor::from_vector<double>({0.3, -0.4}, {2}));
  for (Tensor& t : in) t.set_requires_grad(true);
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& x) {
        return attention::exact_window_attention(x[0], x[1], x[2], x[3], Tensor(), Tensor(), c.spec(1e-12),
                                                 [&](const Tensor& y) { return logits_of(y, x[3], Tensor()); }, x[4]);
      },
      in);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(ExactWindow, DecodingEqualsTheForward) {
  for (const Case& c : {Case{2, 29, 4, 2, 6, 8, 6, 8, 5, 0, true, false}, Case{1, 35, 2, 1, 4, 8, 5, 8, 6, 14, false, false},
                        Case{1, 20, 2, 1, 4, 8, 4, 8, 3, 3, false, false}, Case{1, 9, 2, 2, 4, 6, 4, 8, 16, 0, false, false}})
    for (DType dtype : {DType::f64, DType::f32}) {
      const std::vector<Tensor> in = c.inputs(dtype);
      const Tensor lw = c.log_weight(dtype);
      const Tensor want = run_op(c, in, dtype);
      const Tensor lq = logits_of(in[0], in[3], lw), lk = logits_of(in[1], in[3], lw);
      // A prompt of 3 positions (inside the window), or of all but the last 4 (far keys
      // folded at once on global layers), as one call, then one position at a time.
      for (const std::int64_t prompt : {std::int64_t{3}, c.t - 4}) {
        std::unique_ptr<nn::DecodeState> state;
        std::vector<Tensor> steps;
        for (std::int64_t t0 = 0; t0 < c.t;) {
          const std::int64_t t1 = t0 == 0 ? prompt : t0 + 1;
          auto at = [&](const Tensor& x) { return slice(x, 1, t0, t1); };
          steps.push_back(
              attention::exact_window_decode(at(in[0]), at(in[1]), at(lq), at(lk), at(in[2]), c.spec(), state));
          t0 = t1;
        }
        const double tol = dtype == DType::f64 ? 1e-11 : 3e-5;
        expect_close(concat(steps, 1), want, tol, tol,
                     "decode " + c.name() + " " + dtype_name(dtype) + " prompt " + std::to_string(prompt));
        // The state is O(W + m Dv): never more than max(W, w) + 1 cached positions.
        const auto* held = dynamic_cast<const attention::ExactWindowState*>(state.get());
        ASSERT_NE(held, nullptr);
        EXPECT_LE(held->keys.size(1), std::max(c.window, c.layer_window));
      }
    }
}

// The log normalisers the merge is built on, against their definitions.
TEST(ExactWindow, LogNormalisersOfTheOps) {
  const Case c{2, 27, 4, 2, 5, 6, 5, 8, 1, 0, true, true, Padding::holes};
  const std::vector<Tensor> in = c.inputs(DType::f64);
  const Tensor lw = c.log_weight(DType::f64);
  const Tensor lq = logits_of(in[0], in[3], lw), lk = logits_of(in[1], in[3], lw);
  const std::vector<std::int32_t> real = c.real();
  const double eps = 1e-3;  // large enough to show where it enters
  const std::int64_t group = c.hq / c.hkv;
  const std::vector<double> q = testing::values(lq), k = testing::values(lk), xq = testing::values(in[0]),
                            xk = testing::values(in[1]);
  for (std::int64_t window : {0, 6}) {
    std::vector<double> want_lin(c.b * c.hq * c.t), want_lse(c.b * c.hq * c.t);
    for (std::int64_t b = 0; b < c.b; ++b)
      for (std::int64_t h = 0; h < c.hq; ++h)
        for (std::int64_t t = 0; t < c.t; ++t) {
          const std::int64_t kv = h / group;
          double qoff = kNegInf, o = kNegInf, sum_features = 0, sum_exp = 0;
          for (std::int64_t f = 0; f < c.m; ++f) qoff = std::max(qoff, q[((b * c.t + t) * c.hq + h) * c.m + f]);
          for (std::int64_t j = 0; j <= t; ++j) {
            if (!real[b * c.t + j] || (window > 0 && j <= t - window)) continue;
            double dot = 0;
            for (std::int64_t i = 0; i < c.r; ++i)
              dot += xq[((b * c.t + t) * c.hq + h) * c.r + i] * xk[((b * c.t + j) * c.hkv + kv) * c.r + i];
            sum_exp += std::exp(dot);
            for (std::int64_t f = 0; f < c.m; ++f) {
              const double kl = k[((b * c.t + j) * c.hkv + kv) * c.m + f];
              o = std::max(o, kl);
              sum_features += std::exp(q[((b * c.t + t) * c.hq + h) * c.m + f] + kl);
            }
          }
          const std::int64_t row = (b * c.hq + h) * c.t + t;
          want_lin[row] = o == kNegInf ? kNegInf : std::log(sum_features + eps * std::exp(qoff + o));
          want_lse[row] = sum_exp == 0 ? kNegInf : std::log(sum_exp);
        }
    const NormalizedAttention lin = linear_attention_with_norm(lq, lk, in[2], true, eps, 8, c.mask(), window);
    const NormalizedAttention lse = flash_attention_with_lse(pad_last_dim(in[0], c.dv),
                                                             pad_last_dim(in[1], c.dv), in[2], true, 1.0,
                                                             c.mask(), window);
    const std::vector<double> got_lin = testing::values(lin.log_norm), got_lse = testing::values(lse.log_norm);
    for (std::size_t i = 0; i < want_lin.size(); ++i) {
      if (want_lin[i] == kNegInf) {
        EXPECT_EQ(got_lin[i], kNegInf) << "row " << i;
      } else {
        EXPECT_NEAR(got_lin[i], want_lin[i], 1e-11) << "linear, window " << window << ", row " << i;
      }
      if (want_lse[i] == kNegInf) {
        EXPECT_EQ(got_lse[i], kNegInf) << "row " << i;
      } else {
        EXPECT_NEAR(got_lse[i], want_lse[i], 1e-11) << "flash, window " << window << ", row " << i;
      }
    }
    if (window == 0) {  // the fused op's too
      const NormalizedAttention fused =
          random_feature_attention_with_norm(in[0], in[1], in[2], in[3], lw, true, eps, 8, c.mask());
      const std::vector<double> a = testing::values(fused.log_norm), b = testing::values(lin.log_norm);
      for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(a[i] == b[i] || std::fabs(a[i] - b[i]) <= 1e-11) << "fused op's log_norm, row " << i;
    }
  }
}

// Both outputs of each op differentiated at once (rows that see a key: no padding).
TEST(ExactWindow, GradcheckOfTheLogNormalisers) {
  const Case c{1, 11, 2, 1, 3, 4, 3, 4, 1, 0, true, false};
  std::vector<Tensor> in = c.inputs(DType::f64);
  const Tensor lw = c.log_weight(DType::f64);
  for (Tensor& t : in) t.set_requires_grad(true);
  auto both = [](const NormalizedAttention& a) {
    return concat({reshape(a.out, {a.out.numel()}), reshape(a.log_norm, {a.log_norm.numel()})}, 0);
  };
  const GradcheckResult fused = gradcheck(
      [&](const std::vector<Tensor>& x) {
        return both(random_feature_attention_with_norm(x[0], x[1], x[2], x[3], lw, true, 1e-12, 4));
      },
      in);
  EXPECT_TRUE(fused.ok) << "random_feature_attention_with_norm: " << fused.report;
  for (std::int64_t window : {0, 5}) {
    const GradcheckResult lin = gradcheck(
        [&](const std::vector<Tensor>& x) {
          return both(linear_attention_with_norm(logits_of(x[0], x[3], lw), logits_of(x[1], x[3], lw), x[2], true,
                                                 1e-12, 4, Tensor(), window));
        },
        in);
    EXPECT_TRUE(lin.ok) << "linear_attention_with_norm, window " << window << ": " << lin.report;
    const GradcheckResult flash = gradcheck(
        [&](const std::vector<Tensor>& x) {
          return both(flash_attention_with_lse(x[0], x[1], x[2], true, 0.7, Tensor(), window));
        },
        in);
    EXPECT_TRUE(flash.ok) << "flash_attention_with_lse, window " << window << ": " << flash.report;
  }
}

TEST(ExactWindow, ConfigRules) {
  attention::AttentionConfig a;
  a.exact_window = 64;
  a.kind = attention::Kind::softmax;
  EXPECT_NE(testing::error_of([&] { attention::validate(a, 64); }).find("attention.exact_window: needs a random-feature kind"),
            std::string::npos);
  a.kind = attention::Kind::darkformer;
  a.mode = attention::Mode::exact;
  EXPECT_NE(testing::error_of([&] { attention::validate(a, 64); }).find("attention.exact_window: needs mode \"linear\""),
            std::string::npos);
  a.mode = attention::Mode::linear;
  EXPECT_EQ(testing::error_of([&] { attention::validate(a, 64); }), "");
  a.window_balance = true;
  EXPECT_EQ(testing::error_of([&] { attention::validate(a, 64); }), "");
  a.far_field = attention::FarField::none;
  EXPECT_NE(testing::error_of([&] { attention::validate(a, 64); }).find("attention.window_balance: weighs the exact window"),
            std::string::npos);
  a.far_field = attention::FarField::features;
  a.exact_window = 0;
  EXPECT_NE(testing::error_of([&] { attention::validate(a, 64); }).find("attention.window_balance"), std::string::npos);
}

// attention.window_balance gives an exact-window layer a parameter b (one per query head,
// feature_map.window_balance, 0 at the start) that its forward and decoding apply as the far
// bias above; a layer without the key has none.
TEST(ExactWindow, TheWindowBalanceIsAParameterOfTheLayer) {
  attention::AttentionConfig a;
  a.kind = attention::Kind::performer;
  a.num_features = 8;
  a.exact_window = 4;
  const nn::AttentionShape shape{4, 2, 6, 0, DType::f64, 0};
  EXPECT_TRUE(attention::make_factory(a)(shape)->named_parameters().empty());
  a.window_balance = true;
  std::unique_ptr<nn::AttentionKernel> kernel = attention::make_factory(a)(shape);
  auto params = kernel->named_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "window_balance");
  EXPECT_EQ(params[0].second->shape(), Shape({4}));
  EXPECT_EQ(max(abs(*params[0].second)).item(), 0.0);
  const Tensor q = Tensor::randn({1, 15, 4, 6}, 12, 0, DType::f64), k = Tensor::randn({1, 15, 2, 6}, 12, 1, DType::f64),
               v = Tensor::randn({1, 15, 2, 6}, 12, 2, DType::f64);
  a.window_balance = false;
  const Tensor unbalanced = attention::make_factory(a)(shape)->forward(q, k, v);
  expect_close(kernel->forward(q, k, v), unbalanced, 1e-12, 1e-12, "balance 0");
  params[0].second->copy_(Tensor::from_vector<double>({0.5, -1.0, 2.0, 0.0}, {4}));
  const Tensor balanced = kernel->forward(q, k, v);
  EXPECT_GT(max(abs(sub(balanced, unbalanced))).item(), 1e-3);
  std::unique_ptr<nn::DecodeState> state;
  expect_close(kernel->decode(q, k, v, state), balanced, 1e-11, 1e-11, "balanced decode");
  EXPECT_NE(testing::error_of([&] { kernel->export_form(); }).find("window balance"), std::string::npos);
}

}  // namespace
}  // namespace dark::exact_window_test
