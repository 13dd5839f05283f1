// linear_attention (the fused random-feature attention kernel on feature logits): float64
// gradchecks; forward and gradients against a naive O(T^2) composition of small ops with the
// same offsets and eps (1e-10 in float64, ~1e-5 in float32); independence from the chunk
// size; causal prefixes bit-identical when later positions change (mid-chunk); no overflow
// with logits around +80; bitwise determinism across runs and thread counts. The same with
// key padding masks (right, left and holes), plus: padded keys get zero gradients and their
// values never change a real output, queries that see no real key give exactly 0, an
// all-ones mask gives the bits of no mask, and logits of -1000 / +80 stay finite. The
// sliding window (window > 0): gradchecks, the naive reference with masks, chunk-size
// independence, a covering window gives the causal op's bits, keys that left the window
// with logits 60 higher leave float32 accurate, determinism across thread counts.
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
using testing::Padding;
using testing::kPaddings;
using testing::mask_tensor;
using testing::padding_mask;
using testing::padding_name;

Tensor randn(const Shape& shape, std::uint64_t stream, DType dtype) {
  return Tensor::randn(shape, 2025, stream, DType::f64).to(dtype);
}

// The reference: A = exp(q - qoff_t - o_t) exp(k)^T computed densely (with a per-(b, kv)
// constant c moved between the factors so neither overflows in float64), masked for causal
// and for padded keys (real: (B, T) 0 / 1, empty = no mask), then (A v) / (rowsum(A) + eps).
// The offsets are computed here by plain loops over the real keys, as constants. Padded
// keys' shifted logits are replaced by 0 before exp so their columns are finite zeros.
// window > 0: keys j <= t - window are masked too and o_t is the max over the window's keys.
Tensor naive_linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double eps,
                              const std::vector<std::int32_t>& real = {}, std::int64_t window = 0) {
  const std::int64_t b_n = q.shape()[0], t_n = q.shape()[1], hq = q.shape()[2], m = q.shape()[3];
  const std::int64_t hkv = k.shape()[2], dv = v.shape()[3], group = hq / hkv;
  const std::vector<double> qv = values(q.detach()), kv = values(k.detach());
  const auto is_real = [&](std::int64_t b, std::int64_t j) { return real.empty() || real[b * t_n + j] != 0; };
  std::vector<double> shift_q(b_n * hq * t_n), shift_k(b_n * hq);
  for (std::int64_t b = 0; b < b_n; ++b)
    for (std::int64_t g = 0; g < hkv; ++g) {
      std::vector<double> run(t_n), own(t_n, -INFINITY);
      double r = -INFINITY;
      for (std::int64_t t = 0; t < t_n; ++t) {
        if (is_real(b, t))
          for (std::int64_t f = 0; f < m; ++f) own[t] = std::max(own[t], kv[((b * t_n + t) * hkv + g) * m + f]);
        r = std::max(r, own[t]);
        run[t] = r;
        if (window > 0) {  // the max over the window's keys only
          run[t] = -INFINITY;
          for (std::int64_t j = std::max<std::int64_t>(0, t - window + 1); j <= t; ++j) run[t] = std::max(run[t], own[j]);
        }
      }
      const double c = std::isfinite(r) ? r : 0.0;  // max over every real key
      for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
        shift_k[b * hq + h] = -c;
        for (std::int64_t t = 0; t < t_n; ++t) {
          double qoff = -INFINITY;
          for (std::int64_t f = 0; f < m; ++f) qoff = std::max(qoff, qv[((b * t_n + t) * hq + h) * m + f]);
          const double o = causal && std::isfinite(run[t]) ? run[t] : c;  // a row without keys is all masked
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
  Tensor ks = add(kh, sk);
  std::vector<double> keep, key_real;  // (B, 1, T, T) and (B, 1, T, 1)
  for (std::int64_t b = 0; b < b_n; ++b)
    for (std::int64_t i = 0; i < t_n; ++i) {
      key_real.push_back(is_real(b, i));
      for (std::int64_t j = 0; j < t_n; ++j)
        keep.push_back((!causal || j <= i) && (window == 0 || j > i - window) && is_real(b, j) ? 1.0 : 0.0);
    }
  ks = where(Tensor::from_vector(key_real, {b_n, 1, t_n, 1}), ks, Tensor::zeros({}, dt));
  Tensor a = matmul(exp(add(qh, sq)), exp(ks), false, true);  // (B, Hq, T, T)
  a = mul(a, Tensor::from_vector(keep, {b_n, 1, t_n, t_n}).to(dt));
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
Fn masked_fn(bool causal, double eps, std::int64_t chunk, const Tensor& mask) {
  return [=](const std::vector<Tensor>& in) {
    return linear_attention(in[0], in[1], in[2], causal, eps, chunk, mask);
  };
}
Fn masked_naive_fn(bool causal, double eps, const std::vector<std::int32_t>& real) {
  return [=](const std::vector<Tensor>& in) {
    return naive_linear_attention(in[0], in[1], in[2], causal, eps, real);
  };
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

// With `masked`, a holes mask that is also flipped after t in the changed run.
TEST(LinearAttention, CausalPrefixIsBitIdentical) {
  struct Probe {
    std::int64_t len, chunk, t;
  };
  const Probe probes[] = {{40, 8, 13}, {40, 8, 21}, {40, 8, 8}, {100, 64, 37}, {100, 64, 70}};
  for (const bool masked : {false, true})
    for (const Probe p : probes) {
      const Case c{2, p.len, 4, 2, 8, 6, p.chunk, true};
      const std::vector<Tensor> in = c.inputs(DType::f32, 21);
      const std::vector<Tensor> changed = {change_after(in[0], p.t, 1.0, 31), change_after(in[1], p.t, 6.0, 32),
                                           change_after(in[2], p.t, 0.0, 33)};
      Tensor mask, changed_mask;
      if (masked) {
        std::vector<std::int32_t> real = padding_mask(Padding::holes, c.b, p.len);
        mask = mask_tensor(real, c.b);
        for (std::int64_t bb = 0; bb < c.b; ++bb)
          for (std::int64_t j = p.t + 1; j < p.len; ++j) real[bb * p.len + j] = 1 - real[bb * p.len + j];
        changed_mask = mask_tensor(real, c.b);
      }
      const Tensor a = linear_attention(in[0], in[1], in[2], true, 1e-6, p.chunk, mask);
      const Tensor b = linear_attention(changed[0], changed[1], changed[2], true, 1e-6, p.chunk, changed_mask);
      const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
      const std::int64_t row = c.hq * c.dv;
      for (std::int64_t bb = 0; bb < c.b; ++bb) {
        const std::size_t off = bb * p.len * row;
        EXPECT_EQ(std::memcmp(x.data() + off, y.data() + off, (p.t + 1) * row * sizeof(float)), 0)
            << c.name() << (masked ? " masked" : "") << " prefix up to t=" << p.t << " changed (batch " << bb << ")";
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

// Also with a key padding mask (holes, and left padding: queries without real keys).
TEST(LinearAttention, Deterministic) {
  const int saved = omp_get_max_threads();
  for (const Tensor& mask : {Tensor(), mask_tensor(padding_mask(Padding::holes, 2, 150), 2),
                             mask_tensor(padding_mask(Padding::left, 2, 150), 2)})
    for (bool causal : {true, false}) {
      const Case c{2, 150, 4, 2, 16, 8, 32, causal};
      const std::string tag = c.name() + (mask.defined() ? " masked" : "");
      const std::vector<Tensor> in = c.inputs(DType::f32, 51);
      std::vector<GradRun> runs;
      for (int threads : {saved, saved, 1, 2, 3}) {
        omp_set_num_threads(threads);
        runs.push_back(run_with_grad(masked_fn(causal, 1e-6, c.chunk, mask), in));
      }
      omp_set_num_threads(saved);
      for (std::size_t i = 1; i < runs.size(); ++i) {
        EXPECT_TRUE(same_bits(runs[0].out, runs[i].out)) << tag << " run " << i;
        for (std::size_t j = 0; j < 3; ++j)
          EXPECT_TRUE(same_bits(runs[0].grads[j], runs[i].grads[j])) << tag << " run " << i << " grad " << j;
      }
    }
}


TEST(LinearAttention, MaskedGradcheck) {
  for (const Case& c : {kCases[0], kCases[1], kCases[4], Case{2, 11, 2, 1, 3, 2, 4, true}})
    for (const Padding kind : kPaddings) {
      std::vector<Tensor> in = c.inputs(DType::f64, 61);
      for (Tensor& x : in) {
        x = x.detach();
        x.set_requires_grad(true);
      }
      const Tensor mask = mask_tensor(padding_mask(kind, c.b, c.t), c.b);
      const GradcheckResult r = gradcheck(masked_fn(c.causal, 1e-10, c.chunk, mask), in);
      EXPECT_TRUE(r.ok) << c.name() << padding_name(kind) << ": max abs error " << r.max_abs_error
                        << ", max rel error " << r.max_rel_error << "\n"
                        << r.report;
      EXPECT_EQ(tape_size(), 0u);
    }
}

TEST(LinearAttention, MaskedMatchesNaive) {
  for (DType dt : {DType::f64, DType::f32}) {
    const bool f64 = dt == DType::f64;
    for (const Case& c : kCases)
      for (const Padding kind : kPaddings)
        for (double eps : {1e-6, 0.5}) {
          const std::vector<std::int32_t> real = padding_mask(kind, c.b, c.t);
          const GradRun a = run_with_grad(masked_fn(c.causal, eps, c.chunk, mask_tensor(real, c.b)), c.inputs(dt));
          const GradRun b = run_with_grad(masked_naive_fn(c.causal, eps, real), c.inputs(dt));
          expect_runs_close(a, b, f64 ? 1e-10 : 1e-5, f64 ? 1e-10 : 1e-4,
                            c.name() + padding_name(kind) + " eps " + std::to_string(eps) + (f64 ? " f64" : " f32"));
        }
  }
}

// Rows (B, T, H, D) of x at positions where `real` is 0 replaced: by inf / NaN / 1e4 in
// turn when `non_finite`, else by 60 + small offsets (above every real logit).
Tensor change_padded(const Tensor& x, const std::vector<std::int32_t>& real, bool non_finite) {
  std::vector<double> a = values(x);
  const std::int64_t row = x.shape()[2] * x.shape()[3];
  for (std::size_t p = 0; p < real.size(); ++p)
    if (real[p] == 0)
      for (std::int64_t i = 0; i < row; ++i) {
        double& e = a[p * row + i];
        const std::int64_t r = (static_cast<std::int64_t>(p) + i) % 3;
        e = non_finite ? (r == 0 ? INFINITY : r == 1 ? NAN : 1e4) : 60.0 + static_cast<double>(r);
      }
  return Tensor::from_vector(a, x.shape()).to(x.dtype());
}

// values(x) at positions (B, T, ...) where `real` is nonzero.
std::vector<double> at_real(const Tensor& x, const std::vector<std::int32_t>& real) {
  const std::vector<double> a = values(x);
  const std::size_t row = a.size() / real.size();
  std::vector<double> kept;
  for (std::size_t p = 0; p < real.size(); ++p)
    if (real[p] != 0) kept.insert(kept.end(), a.begin() + p * row, a.begin() + (p + 1) * row);
  return kept;
}

bool same_bits(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

// Whatever k and v hold at padded positions (inf and NaN included), every output and every
// gradient keeps its bits, and padded keys get dk = dv = 0 exactly. Queries at padded
// positions are still computed: changing q there changes only their own outputs.
TEST(LinearAttention, PaddedKeysAreInert) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool causal : {true, false})
      for (const Padding kind : {Padding::left, Padding::holes}) {
        const Case c{2, 30, 4, 2, 5, 3, 8, causal};
        const std::string tag = c.name() + padding_name(kind) + " " + dtype_name(dt);
        const std::vector<std::int32_t> real = padding_mask(kind, c.b, c.t);
        const Fn fn = masked_fn(causal, 1e-6, c.chunk, mask_tensor(real, c.b));
        const std::vector<Tensor> in = c.inputs(dt, 71);
        const GradRun a = run_with_grad(fn, in);
        const GradRun b =
            run_with_grad(fn, {in[0], change_padded(in[1], real, true), change_padded(in[2], real, true)});
        EXPECT_TRUE(same_bits(a.out, b.out)) << tag;
        for (std::size_t j = 0; j < 3; ++j) EXPECT_TRUE(same_bits(a.grads[j], b.grads[j])) << tag << " grad " << j;
        std::vector<std::int32_t> padded(real.size());
        for (std::size_t p = 0; p < real.size(); ++p) padded[p] = 1 - real[p];
        for (std::size_t j = 1; j < 3; ++j)
          for (const double g : at_real(a.grads[j], padded)) ASSERT_EQ(g, 0.0) << tag << " grad " << j;
        const Tensor moved = fn({change_padded(in[0], real, false), change_padded(in[1], real, false),
                                 change_padded(in[2], real, false)});
        EXPECT_TRUE(same_bits(at_real(a.out, real), at_real(moved, real))) << tag << " with q changed too";
      }
}

// An all-ones mask of any dtype gives the bits of no mask, and a mask's dtype and nonzero
// values do not matter (nonzero = real key).
TEST(LinearAttention, MaskValuesAndDtypes) {
  for (bool causal : {true, false}) {
    const Case c{2, 70, 4, 2, 6, 5, 16, causal};
    const std::vector<Tensor> in = c.inputs(DType::f32, 81);
    const GradRun plain = run_with_grad(fused_fn(causal, 1e-6, c.chunk), in);
    const std::vector<std::int32_t> holes = padding_mask(Padding::holes, c.b, c.t);
    const GradRun holed = run_with_grad(masked_fn(causal, 1e-6, c.chunk, mask_tensor(holes, c.b)), in);
    for (const DType mt : {DType::i32, DType::i64, DType::f32, DType::f64}) {
      const std::string tag = c.name() + " mask " + dtype_name(mt);
      const double value = mt == DType::f64 ? 0.5 : mt == DType::i64 ? -3.0 : 2.0;
      const GradRun ones = run_with_grad(masked_fn(causal, 1e-6, c.chunk, Tensor::full({c.b, c.t}, value, mt)), in);
      std::vector<double> scaled(holes.begin(), holes.end());
      for (double& x : scaled) x *= value;
      const Tensor holes_mt = Tensor::from_vector(scaled, {c.b, c.t}).to(mt);
      const GradRun other = run_with_grad(masked_fn(causal, 1e-6, c.chunk, holes_mt), in);
      EXPECT_TRUE(same_bits(plain.out, ones.out)) << tag;
      EXPECT_TRUE(same_bits(holed.out, other.out)) << tag;
      for (std::size_t j = 0; j < 3; ++j) {
        EXPECT_TRUE(same_bits(plain.grads[j], ones.grads[j])) << tag << " grad " << j;
        EXPECT_TRUE(same_bits(holed.grads[j], other.grads[j])) << tag << " grad " << j;
      }
    }
  }
}

// Queries that see no real key (left padding; a batch row with every key padded) give
// exactly 0 and zero gradient, with eps = 0 too, and nothing is NaN or inf.
TEST(LinearAttention, QueriesWithoutRealKeys) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool causal : {true, false})
      for (double eps : {1e-6, 0.0}) {
        const Case c{2, 21, 2, 1, 4, 3, 8, causal};
        std::vector<std::int32_t> real = padding_mask(Padding::left, c.b, c.t);  // batch 0 from t = 7
        std::fill(real.begin() + c.t, real.end(), 0);                             // batch 1: no real key
        const std::string tag = c.name() + " eps " + std::to_string(eps) + " " + dtype_name(dt);
        const GradRun r = run_with_grad(masked_fn(causal, eps, c.chunk, mask_tensor(real, c.b)), c.inputs(dt, 91));
        for (const Tensor& x : {r.out, r.grads[0], r.grads[1], r.grads[2]})
          for (const double e : values(x)) ASSERT_TRUE(std::isfinite(e)) << tag;
        const std::vector<double> out = values(r.out), dq = values(r.grads[0]);
        const std::int64_t out_row = c.hq * c.dv, q_row = c.hq * c.m, first_real = c.t / 3;
        for (std::int64_t t = 0; t < c.t; ++t) {
          const bool empty0 = causal && t < first_real;  // batch 0, causal: no real key yet
          for (std::int64_t i = 0; i < out_row; ++i) {
            if (empty0) EXPECT_EQ(out[t * out_row + i], 0.0) << tag << " t " << t;
            EXPECT_EQ(out[(c.t + t) * out_row + i], 0.0) << tag << " batch 1, t " << t;
          }
          for (std::int64_t i = 0; i < q_row; ++i) {
            if (empty0) EXPECT_EQ(dq[t * q_row + i], 0.0) << tag << " t " << t;
            EXPECT_EQ(dq[(c.t + t) * q_row + i], 0.0) << tag << " batch 1, t " << t;
          }
        }
        for (std::size_t j = 1; j < 3; ++j)
          for (const double g : values(slice(r.grads[j], 0, 1, 2))) ASSERT_EQ(g, 0.0) << tag << " grad " << j;
      }
}

// Real keys with logits around -1000 or +80 (the running max jumping mid-chunk) and padded
// keys far above them (they must not enter the offsets): finite, and equal to the float64
// reference.
TEST(LinearAttention, MaskedExtremeLogits) {
  for (bool causal : {true, false})
    for (const Padding kind : {Padding::left, Padding::holes})
      for (double base : {-1000.0, 80.0}) {
        const Case c{2, 50, 2, 1, 8, 4, 16, causal};
        const std::vector<std::int32_t> real = padding_mask(kind, c.b, c.t);
        std::vector<Tensor> in = c.inputs(DType::f32, 101);
        in[0] = add_scalar(in[0], 80.0);
        std::vector<float> kv = add_scalar(in[1], base).to_vector<float>();
        for (std::int64_t f = 0; f < c.m; ++f) kv[21 * c.m + f] += 20.0f;
        for (std::size_t p = 0; p < real.size(); ++p)
          if (real[p] == 0)
            for (std::int64_t f = 0; f < c.m; ++f) kv[p * c.m + f] = static_cast<float>(base) + 200.0f;
        in[1] = Tensor::from_vector(kv, in[1].shape());
        const std::string tag = c.name() + padding_name(kind) + " logits " + std::to_string(base);
        const Tensor mask = mask_tensor(real, c.b);
        const GradRun a = run_with_grad(masked_fn(causal, 1e-6, c.chunk, mask), in);
        for (const Tensor& x : {a.out, a.grads[0], a.grads[1], a.grads[2]})
          for (const double e : values(x)) ASSERT_TRUE(std::isfinite(e)) << tag;
        std::vector<Tensor> in64;
        for (const Tensor& x : in) in64.push_back(x.to(DType::f64));
        const GradRun b = run_with_grad(masked_naive_fn(causal, 1e-6, real), in64);
        expect_runs_close(a, b, 1e-4, 1e-3, tag);
        expect_close(a.out, b.out, 1e-5, 1e-4, tag + " forward");
      }
}

// ---- sliding window (linear_attention with window > 0) ----

struct WindowCase {
  Case shape;
  std::int64_t window;
  std::string name() const { return shape.name() + " window " + std::to_string(window); }
};

// Windows shorter than, equal to and longer than a chunk, not multiples of it, of 1, and
// several chunks of middle states (T 70, chunk 4, window 17: 3 middle chunks).
const std::vector<WindowCase> kWindowCases = {
    {{1, 13, 4, 2, 6, 5, 4, true}, 5}, {{1, 13, 4, 2, 6, 5, 4, true}, 4}, {{1, 13, 4, 2, 6, 5, 4, true}, 1},
    {{1, 13, 4, 2, 6, 5, 4, true}, 3}, {{2, 70, 2, 1, 3, 2, 4, true}, 17}, {{2, 70, 2, 1, 3, 2, 8, true}, 16},
    {{1, 9, 1, 1, 4, 3, 1, true}, 2},  {{2, 40, 2, 2, 5, 3, 64, true}, 9},
};

Fn windowed_fn(double eps, std::int64_t chunk, std::int64_t window, const Tensor& mask = Tensor()) {
  return [=](const std::vector<Tensor>& in) {
    return linear_attention(in[0], in[1], in[2], true, eps, chunk, mask, window);
  };
}
Fn windowed_naive_fn(double eps, std::int64_t window, const std::vector<std::int32_t>& real = {}) {
  return [=](const std::vector<Tensor>& in) {
    return naive_linear_attention(in[0], in[1], in[2], true, eps, real, window);
  };
}

TEST(WindowedLinearAttention, Gradcheck) {
  for (const WindowCase& c : kWindowCases) {
    if (c.shape.t > 40) continue;  // finite differences over every input: the short cases suffice
    for (const bool masked : {false, true}) {
      std::vector<Tensor> in = c.shape.inputs(DType::f64, 71);
      for (Tensor& x : in) {
        x = x.detach();
        x.set_requires_grad(true);
      }
      const Tensor mask = masked ? mask_tensor(padding_mask(Padding::holes, c.shape.b, c.shape.t), c.shape.b) : Tensor();
      const GradcheckResult r = gradcheck(windowed_fn(1e-10, c.shape.chunk, c.window, mask), in);
      EXPECT_TRUE(r.ok) << c.name() << (masked ? " holes" : "") << ": max abs error " << r.max_abs_error
                        << ", max rel error " << r.max_rel_error << "\n"
                        << r.report;
      EXPECT_EQ(tape_size(), 0u);
    }
  }
}

TEST(WindowedLinearAttention, MatchesNaive) {
  for (DType dt : {DType::f64, DType::f32})
    for (const WindowCase& c : kWindowCases)
      for (double eps : {1e-6, 0.5}) {
        const bool f64 = dt == DType::f64;
        const std::string tag = c.name() + " eps " + std::to_string(eps) + (f64 ? " f64" : " f32");
        expect_runs_close(run_with_grad(windowed_fn(eps, c.shape.chunk, c.window), c.shape.inputs(dt)),
                          run_with_grad(windowed_naive_fn(eps, c.window), c.shape.inputs(dt)), f64 ? 1e-10 : 1e-5,
                          f64 ? 1e-10 : 1e-4, tag);
        for (const Padding kind : kPaddings) {
          const std::vector<std::int32_t> real = padding_mask(kind, c.shape.b, c.shape.t);
          expect_runs_close(
              run_with_grad(windowed_fn(eps, c.shape.chunk, c.window, mask_tensor(real, c.shape.b)), c.shape.inputs(dt)),
              run_with_grad(windowed_naive_fn(eps, c.window, real), c.shape.inputs(dt)), f64 ? 1e-10 : 1e-5,
              f64 ? 1e-10 : 1e-4, tag + padding_name(kind));
        }
      }
}

TEST(WindowedLinearAttention, ChunkSizeDoesNotMatter) {
  const Case c{2, 70, 4, 2, 7, 5, 64, true};
  const std::vector<Tensor> in = c.inputs(DType::f64, 13);
  for (std::int64_t window : {1, 6, 31}) {
    const GradRun ref = run_with_grad(windowed_fn(1e-6, 64, window), in);
    for (std::int64_t chunk : {1, 5, 8, 1000})
      expect_runs_close(run_with_grad(windowed_fn(1e-6, chunk, window), in), ref, 1e-12, 1e-12,
                        c.name() + " window " + std::to_string(window) + " chunk " + std::to_string(chunk));
  }
}

TEST(WindowedLinearAttention, WindowCoveringTheSequenceIsTheCausalOp) {
  const Case c{2, 13, 4, 2, 6, 5, 4, true};
  const std::vector<Tensor> in = c.inputs(DType::f32, 17);
  const GradRun causal = run_with_grad(fused_fn(true, 1e-6, c.chunk), in);
  for (std::int64_t window : {13, 14, 1000}) {
    const GradRun windowed = run_with_grad(windowed_fn(1e-6, c.chunk, window), in);
    EXPECT_TRUE(same_bits(windowed.out, causal.out)) << window;
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(windowed.grads[i], causal.grads[i])) << window;
  }
  // One position short of covering it: the first key leaves the last query's window.
  const GradRun short_window = run_with_grad(windowed_fn(1e-6, c.chunk, 12), in);
  EXPECT_FALSE(same_bits(short_window.out, causal.out));
}

// Keys that left the window with logits 60 above the window's: a prefix-difference scheme at
// the running offset would underflow the window's features to 0 in float32 (exp(-60)); the
// window's own offset keeps every output at float32 accuracy against the float64 reference.
TEST(WindowedLinearAttention, KeysThatLeftTheWindowDoNotScaleIt) {
  const Case c{1, 48, 2, 1, 4, 3, 8, true};
  std::vector<Tensor> in = c.inputs(DType::f64, 19);
  std::vector<double> k = values(in[1]);
  for (std::int64_t t = 0; t < 16; ++t)
    for (std::int64_t f = 0; f < c.m; ++f) k[t * c.m + f] += 60.0;
  in[1] = Tensor::from_vector(k, in[1].shape());
  std::vector<Tensor> in32;
  for (const Tensor& x : in) in32.push_back(x.to(DType::f32));
  const GradRun a = run_with_grad(windowed_fn(1e-6, c.chunk, 10), in32);
  const GradRun b = run_with_grad(windowed_naive_fn(1e-6, 10), in);
  expect_runs_close(a, b, 1e-5, 1e-4, c.name() + " window 10, keys 0..15 raised by 60");
  const std::vector<double> out = values(a.out);
  for (double x : out) EXPECT_TRUE(std::isfinite(x));
}

TEST(WindowedLinearAttention, Deterministic) {
  const Case c{2, 70, 4, 2, 7, 5, 8, true};
  const std::vector<Tensor> in = c.inputs(DType::f32, 23);
  const int threads = omp_get_max_threads();
  const GradRun a = run_with_grad(windowed_fn(1e-6, c.chunk, 19), in);
  omp_set_num_threads(1);
  const GradRun b = run_with_grad(windowed_fn(1e-6, c.chunk, 19), in);
  omp_set_num_threads(threads);
  EXPECT_TRUE(same_bits(a.out, b.out));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(a.grads[i], b.grads[i]));
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
  const Tensor k = randn({1, 4, 1, 4}, 2, DType::f32), v = randn({1, 4, 1, 2}, 3, DType::f32);
  for (const Tensor& mask : {Tensor::ones({1, 5}, DType::i32), Tensor::ones({2, 4}, DType::i32),
                             Tensor::ones({4}, DType::f32), Tensor::ones({1, 4, 1}, DType::i64)})
    testing::expect_error([&] { linear_attention(q, k, v, true, 1e-6, 64, mask); },
                          {"linear_attention", "key_mask", mask.describe(), q.describe()});
  testing::expect_error([&] { linear_attention(q, k, v, false, 1e-6, 64, Tensor(), 2); },
                        {"linear_attention", "window", "causal"});
  testing::expect_error([&] { linear_attention(q, k, v, true, 1e-6, 64, Tensor(), -1); },
                        {"linear_attention", "window must be >= 0"});
}

}  // namespace
}  // namespace dark
