// linear_attention (the fused random-feature attention kernel on feature logits): float64
// gradchecks; forward and gradients against a naive O(T^2) composition of small ops with the
// same offsets and eps (1e-10 in float64, ~1e-5 in float32); independence from the chunk
// size; causal prefixes bit-identical when later positions change (mid-chunk); no overflow
// with logits around +80; bitwise determinism across runs and thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/test_util.h"

namespace dark {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

using testing::expect_close;
using testing::values;

Tensor randn(const Shape& shape, std::uint64_t stream, DType dtype) {
  return Tensor::randn(shape, 2025, stream, DType::f64).to(dtype);
}

// The reference: A = exp(q - qoff_t - o_t) exp(k)^T computed densely (with a per-(b, kv)
// constant c moved between the factors so neither overflows in float64), masked for causal,
// then (A v) / (rowsum(A) + eps). The offsets are computed here by plain loops, as constants.
Tensor naive_linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double eps) {
  const std::int64_t b_n = q.shape()[0], t_n = q.shape()[1], hq = q.shape()[2], m = q.shape()[3];
  const std::int64_t hkv = k.shape()[2], dv = v.shape()[3], group = hq / hkv;
  const std::vector<double> qv = values(q.detach()), kv = values(k.detach());
  std::vector<double> shift_q(b_n * hq * t_n), shift_k(b_n * hq);
  for (std::int64_t b = 0; b < b_n; ++b)
    for (std::int64_t g = 0; g < hkv; ++g) {
      std::vector<double> run(t_n);
      double r = -INFINITY;
      for (std::int64_t t = 0; t < t_n; ++t) {
        for (std::int64_t f = 0; f < m; ++f) r = std::max(r, kv[((b * t_n + t) * hkv + g) * m + f]);
        run[t] = r;
      }
      const double c = r;  // max over everything
      for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
        shift_k[b * hq + h] = -c;
        for (std::int64_t t = 0; t < t_n; ++t) {
          double qoff = -INFINITY;
          for (std::int64_t f = 0; f < m; ++f) qoff = std::max(qoff, qv[((b * t_n + t) * hq + h) * m + f]);
          const double o = causal ? run[t] : c;
          shift_q[(b * hq + h) * t_n + t] = -qoff - o + c;
        }
      }
    }
  const DType dt = q.dtype();
  const Tensor sq = Tensor::from_vector(shift_q, {b_n, hq, t_n, 1}).to(dt);
  const Tensor sk = Tensor::from_vector(shift_k, {b_n, hq, 1, 1}).to(dt);
  const Tensor qh = permute(q, {0, 2, 1, 3});  // (B, Hq, T, m)
  Tensor kh = permute(k, {0, 2, 1, 3});        // (B, Hkv, T, m)
  Tensor vh = permute(v, {0, 2, 1, 3});
  if (group > 1) {
    kh = reshape(expand(unsqueeze(kh, 2), {b_n, hkv, group, t_n, m}), {b_n, hq, t_n, m});
    vh = reshape(expand(unsqueeze(vh, 2), {b_n, hkv, group, t_n, dv}), {b_n, hq, t_n, dv});
  }
  Tensor a = matmul(exp(add(qh, sq)), exp(add(kh, sk)), false, true);  // (B, Hq, T, T)
  if (causal) {
    std::vector<double> mask;
    for (std::int64_t i = 0; i < t_n; ++i)
      for (std::int64_t j = 0; j < t_n; ++j) mask.push_back(j <= i ? 1.0 : 0.0);
    a = mul(a, Tensor::from_vector(mask, {t_n, t_n}).to(dt));
  }
  const Tensor out = div(matmul(a, vh), add_scalar(sum(a, {3}, true), eps));
  return permute(out, {0, 2, 1, 3});
}

struct Case {
  std::int64_t b, t, hq, hkv, m, dv, chunk;
  bool causal;
  std::string name() const {
    return "linear_attention[B" + std::to_string(b) + " T" + std::to_string(t) + " Hq" + std::to_string(hq) +
           " Hkv" + std::to_string(hkv) + " m" + std::to_string(m) + " Dv" + std::to_string(dv) + " C" +
           std::to_string(chunk) + (causal ? " causal]" : "]");
  }
  std::vector<Tensor> inputs(DType dt, std::uint64_t stream = 1) const {
    return {randn({b, t, hq, m}, stream, dt), randn({b, t, hkv, m}, stream + 1, dt),
            randn({b, t, hkv, dv}, stream + 2, dt)};
  }
};

Fn fused_fn(bool causal, double eps, std::int64_t chunk) {
  return [=](const std::vector<Tensor>& in) { return linear_attention(in[0], in[1], in[2], causal, eps, chunk); };
}
Fn naive_fn(bool causal, double eps) {
  return [=](const std::vector<Tensor>& in) { return naive_linear_attention(in[0], in[1], in[2], causal, eps); };
}

struct GradRun {
  Tensor out;
  std::vector<Tensor> grads;
};

GradRun run_with_grad(const Fn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : inputs) {
    Tensor leaf = x.detach();
    leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  GradRun r;
  r.out = fn(leaves);
  const Tensor dout = Tensor::randn(r.out.shape(), 99, 0, DType::f64).to(r.out.dtype());
  backward(r.out, dout);
  for (const Tensor& leaf : leaves) r.grads.push_back(leaf.grad());
  EXPECT_EQ(tape_size(), 0u);
  return r;
}

void expect_runs_close(const GradRun& a, const GradRun& b, double atol, double rtol, const std::string& tag) {
  expect_close(a.out, b.out, atol, rtol, tag + " forward");
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    expect_close(a.grads[i], b.grads[i], atol, rtol, tag + " grad of input " + std::to_string(i));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

const std::vector<Case> kCases = {
    {1, 13, 4, 2, 6, 5, 4, false}, {1, 13, 4, 2, 6, 5, 4, true},  // GQA, several chunks, partial last
    {2, 70, 2, 1, 3, 2, 64, true}, {2, 70, 2, 1, 3, 2, 64, false}, {1, 9, 1, 1, 4, 3, 1, true},
};

TEST(LinearAttention, Gradcheck) {
  // eps enters through exp(offsets) (no gradient by design), so finite differences see an
  // O(eps) extra term at each row's argmax logit; a tiny eps keeps it below tolerance.
  for (const Case& c : kCases) {
    std::vector<Tensor> in = c.inputs(DType::f64);
    for (Tensor& x : in) {
      x = x.detach();
      x.set_requires_grad(true);
    }
    const GradcheckResult r = gradcheck(fused_fn(c.causal, 1e-10, c.chunk), in);
    EXPECT_TRUE(r.ok) << c.name() << ": max abs error " << r.max_abs_error << ", max rel error " << r.max_rel_error
                      << "\n"
                      << r.report;
    EXPECT_EQ(tape_size(), 0u);
  }
}

TEST(LinearAttention, MatchesNaive) {
  for (DType dt : {DType::f64, DType::f32}) {
    const bool f64 = dt == DType::f64;
    for (const Case& c : kCases)
      for (double eps : {1e-6, 0.5}) {
        const GradRun a = run_with_grad(fused_fn(c.causal, eps, c.chunk), c.inputs(dt));
        const GradRun b = run_with_grad(naive_fn(c.causal, eps), c.inputs(dt));
        expect_runs_close(a, b, f64 ? 1e-10 : 1e-5, f64 ? 1e-10 : 1e-4,
                          c.name() + " eps " + std::to_string(eps) + (f64 ? " f64" : " f32"));
      }
  }
}

TEST(LinearAttention, ChunkSizeDoesNotMatter) {
  for (bool causal : {true, false}) {
    const Case c{2, 70, 4, 2, 7, 5, 64, causal};
    const std::vector<Tensor> in = c.inputs(DType::f64, 11);
    const GradRun ref = run_with_grad(fused_fn(causal, 1e-6, 64), in);
    for (std::int64_t chunk : {1, 5, 1000})
      expect_runs_close(run_with_grad(fused_fn(causal, 1e-6, chunk), in), ref, 1e-12, 1e-12,
                        c.name() + " chunk " + std::to_string(chunk));
  }
}

// Replaces positions > t of x (B, T, H, D) with other values (plus `shift`).
Tensor change_after(const Tensor& x, std::int64_t t, double shift, std::uint64_t stream) {
  std::vector<float> a = x.to_vector<float>();
  const std::vector<float> r = randn(x.shape(), stream, DType::f32).to_vector<float>();
  const std::int64_t row = x.shape()[2] * x.shape()[3];
  for (std::int64_t b = 0; b < x.shape()[0]; ++b)
    for (std::int64_t s = t + 1; s < x.shape()[1]; ++s)
      for (std::int64_t i = 0; i < row; ++i) {
        const std::int64_t idx = (b * x.shape()[1] + s) * row + i;
        a[idx] = r[idx] * 3.0f + static_cast<float>(shift);
      }
  return Tensor::from_vector(a, x.shape());
}

TEST(LinearAttention, CausalPrefixIsBitIdentical) {
  struct Probe {
    std::int64_t len, chunk, t;
  };
  for (const Probe p : {Probe{40, 8, 13}, Probe{40, 8, 21}, Probe{40, 8, 8}, Probe{100, 64, 37}, Probe{100, 64, 70}}) {
    const Case c{2, p.len, 4, 2, 8, 6, p.chunk, true};
    const std::vector<Tensor> in = c.inputs(DType::f32, 21);
    const std::vector<Tensor> changed = {change_after(in[0], p.t, 1.0, 31), change_after(in[1], p.t, 6.0, 32),
                                         change_after(in[2], p.t, 0.0, 33)};
    const Tensor a = linear_attention(in[0], in[1], in[2], true, 1e-6, p.chunk);
    const Tensor b = linear_attention(changed[0], changed[1], changed[2], true, 1e-6, p.chunk);
    const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
    const std::int64_t row = c.hq * c.dv;
    for (std::int64_t bb = 0; bb < c.b; ++bb) {
      const std::size_t off = bb * p.len * row;
      EXPECT_EQ(std::memcmp(x.data() + off, y.data() + off, (p.t + 1) * row * sizeof(float)), 0)
          << c.name() << " prefix up to t=" << p.t << " changed (batch " << bb << ")";
      EXPECT_NE(std::memcmp(x.data() + off + (p.t + 1) * row, y.data() + off + (p.t + 1) * row, row * sizeof(float)),
                0)
          << "position t+1 should change";
    }
  }
}

TEST(LinearAttention, LargeLogitsDoNotOverflow) {
  for (bool causal : {true, false}) {
    const Case c{1, 50, 2, 1, 8, 4, 16, causal};
    std::vector<Tensor> in = c.inputs(DType::f32, 41);
    in[0] = add_scalar(in[0], 80.0);
    // keys around +80, with the running max jumping mid-chunk (position 21) to ~+100
    std::vector<float> kv = add_scalar(in[1], 80.0).to_vector<float>();
    for (std::int64_t f = 0; f < c.m; ++f) kv[21 * c.m + f] += 20.0f;
    in[1] = Tensor::from_vector(kv, in[1].shape());
    const GradRun a = run_with_grad(fused_fn(causal, 1e-6, c.chunk), in);
    for (const double x : values(a.out)) ASSERT_TRUE(std::isfinite(x));
    for (const Tensor& g : a.grads)
      for (const double x : values(g)) ASSERT_TRUE(std::isfinite(x));
    std::vector<Tensor> in64;
    for (const Tensor& x : in) in64.push_back(x.to(DType::f64));
    const GradRun b = run_with_grad(naive_fn(causal, 1e-6), in64);
    expect_runs_close(a, b, 1e-4, 1e-3, c.name() + " logits +80");
    expect_close(a.out, b.out, 1e-5, 1e-4, c.name() + " logits +80 forward");
  }
}

TEST(LinearAttention, Deterministic) {
  const int saved = omp_get_max_threads();
  for (bool causal : {true, false}) {
    const Case c{2, 150, 4, 2, 16, 8, 32, causal};
    const std::vector<Tensor> in = c.inputs(DType::f32, 51);
    std::vector<GradRun> runs;
    for (int threads : {saved, saved, 1, 3}) {
      omp_set_num_threads(threads);
      runs.push_back(run_with_grad(fused_fn(causal, 1e-6, c.chunk), in));
    }
    omp_set_num_threads(saved);
    for (std::size_t i = 1; i < runs.size(); ++i) {
      EXPECT_TRUE(same_bits(runs[0].out, runs[i].out)) << c.name() << " run " << i;
      for (std::size_t j = 0; j < 3; ++j)
        EXPECT_TRUE(same_bits(runs[0].grads[j], runs[i].grads[j])) << c.name() << " run " << i << " grad " << j;
    }
  }
}

TEST(LinearAttention, Errors) {
  const Tensor q = randn({1, 4, 3, 4}, 1, DType::f32);
  EXPECT_THROW(linear_attention(q, randn({1, 4, 2, 4}, 2, DType::f32), randn({1, 4, 2, 2}, 3, DType::f32), true, 1e-6),
               Error);  // 3 % 2 != 0
  EXPECT_THROW(linear_attention(q, randn({1, 4, 1, 5}, 2, DType::f32), randn({1, 4, 1, 2}, 3, DType::f32), true, 1e-6),
               Error);  // feature count differs
  EXPECT_THROW(linear_attention(q, randn({1, 5, 1, 4}, 2, DType::f32), randn({1, 5, 1, 2}, 3, DType::f32), true, 1e-6),
               Error);  // length differs
  EXPECT_THROW(
      linear_attention(q, randn({1, 4, 1, 4}, 2, DType::f32), randn({1, 4, 1, 2}, 3, DType::f32), true, 1e-6, 0),
      Error);  // chunk 0
  EXPECT_THROW(linear_attention(q, randn({1, 4, 1, 4}, 2, DType::f64), randn({1, 4, 1, 2}, 3, DType::f32), true, 1e-6),
               Error);  // dtype mismatch
}

}  // namespace
}  // namespace dark
