// The fused ops (rms_norm, rope, flash_attention, cross_entropy, swiglu, geglu): float64
// gradchecks, and forward values AND gradients against naive compositions of the small ops
// (within 1e-10 in float64 and ~1e-5 in float32), odd sizes, several tiles, strided inputs.
// Also: flash attention's backward is bitwise reproducible across runs and thread counts,
// its memory stays O(T) at T = S = 2048, and a timing line against the naive composition
// (printed, not asserted). Flash attention with key padding masks (right, left, holes): the
// same checks against a masked reference, plus zero gradients for padded keys, outputs
// independent of padded keys' values, exact zeros for queries without real keys, all-ones
// mask = no mask bitwise, causal prefixes independent of later positions and mask entries.
// Sliding-window flash attention (window W: query t sees keys t + S - T - W < s <= t + S - T):
// gradchecks and forward + gradients against the masked naive composition for W in {1, 3,
// T - 1, >= T}, sizes that are not multiples of the tiles, GQA, key masks and S > T; W >= S
// gives the bits of no window; deterministic over thread counts (both backward schedules);
// decoding with a windowed key/value cache equals the forward pass; a timing line (printed).
// geglu_tanh (tanh-approximated gelu gate) against the formula composed of small ops and
// by gradcheck, including the far tails.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/fused_op_checks.h"
#include "tests/test_util.h"
#include "attention/kv_cache.h"
#include "attention/softmax_attention.h"
#include "core/allocator.h"
#include "core/kernels.h"

namespace dark {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

using testing::expect_add_rms_norm_is_add_then_rms_norm;
using testing::expect_close;
using testing::expect_glu_backward_output_is_the_forward;
using testing::values;
using testing::Padding;
using testing::kPaddings;
using testing::mask_tensor;
using testing::padding_mask;
using testing::padding_name;

Tensor randn(const Shape& shape, std::uint64_t stream, DType dtype) {
  return Tensor::randn(shape, 2024, stream, DType::f64).to(dtype);
}

// Output and input gradients of fn on fresh leaves viewing `inputs` (strides kept), after
// backward with a fixed random upstream gradient.
struct GradRun {
  Tensor out;
  std::vector<Tensor> grads;  // undefined where the input is not differentiated
};

GradRun run_with_grad(const Fn& fn, const std::vector<Tensor>& inputs, const std::vector<bool>& differentiable) {
  std::vector<Tensor> leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor leaf = inputs[i].detach();
    if (differentiable[i]) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  GradRun r;
  r.out = fn(leaves);
  const Tensor dout = Tensor::randn(r.out.shape(), 99, 0, DType::f64).to(r.out.dtype());
  backward(r.out, dout);
  for (std::size_t i = 0; i < leaves.size(); ++i) r.grads.push_back(differentiable[i] ? leaves[i].grad() : Tensor());
  EXPECT_EQ(tape_size(), 0u);
  return r;
}

// The fused op against the naive composition: forward and every gradient.
void expect_matches_naive(const Fn& fused, const Fn& naive, const std::vector<Tensor>& inputs,
                          std::vector<bool> differentiable, const std::string& what) {
  if (differentiable.empty()) differentiable.assign(inputs.size(), true);
  const bool f64 = inputs[0].dtype() == DType::f64;
  const double atol = f64 ? 1e-10 : 1e-5, rtol = f64 ? 1e-10 : 1e-4;
  const GradRun a = run_with_grad(fused, inputs, differentiable);
  const GradRun b = run_with_grad(naive, inputs, differentiable);
  const std::string tag = what + " (" + dtype_name(inputs[0].dtype()) + ")";
  expect_close(a.out, b.out, atol, rtol, tag + " forward");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (differentiable[i])
      expect_close(a.grads[i], b.grads[i], atol, rtol, tag + " grad of input " + std::to_string(i));
}

void expect_gradcheck(const Fn& fn, std::vector<Tensor> inputs, const std::vector<bool>& differentiable,
                      const std::string& what) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = inputs[i].detach();
    if (differentiable[i]) inputs[i].set_requires_grad(true);
  }
  const GradcheckResult r = gradcheck(fn, inputs);
  EXPECT_TRUE(r.ok) << what << ": max abs error " << r.max_abs_error << ", max rel error " << r.max_rel_error << "\n"
                    << r.report;
  EXPECT_EQ(tape_size(), 0u);
}

// ---------------------------------------------------------------------------------------
// rms_norm

Tensor naive_rms_norm(const Tensor& x, const Tensor& w, double eps) {
  return mul(mul(x, rsqrt(add_scalar(mean(square(x), {-1}, true), eps))), w);
}

// add_rms_norm against add then rms_norm: the same bits forward and backward
// (tests/fused_op_checks.h), and a gradcheck.
TEST(FusedAddRmsNorm, EqualsAddThenRmsNormBitForBit) {
  const double eps = 1e-5;
  for (const DType dt : {DType::f32, DType::f64})
    expect_add_rms_norm_is_add_then_rms_norm(dt, Device::cpu(), {3, 5, 40}, eps);
  expect_gradcheck(
      [eps](const std::vector<Tensor>& in) {
        const SumAndNorm out = add_rms_norm(in[0], in[1], in[2], eps);
        return add(mul_scalar(out.sum, 0.3), out.normed);
      },
      {randn({4, 9}, 6, DType::f64), randn({4, 9}, 7, DType::f64), randn({9}, 8, DType::f64)}, {true, true, true},
      "add_rms_norm[4,9]");
  EXPECT_THROW(add_rms_norm(randn({4, 9}, 6, DType::f32), randn({4, 8}, 7, DType::f32), randn({9}, 8, DType::f32), eps),
               Error);
}

TEST(FusedRmsNorm, Gradcheck) {
  const double eps = 1e-5;
  const Fn fn = [eps](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], eps); };
  expect_gradcheck(fn, {randn({3, 5, 7}, 1, DType::f64), randn({7}, 2, DType::f64)}, {true, true}, "rms_norm[3,5,7]");
  expect_gradcheck(fn, {randn({1, 13}, 3, DType::f64), randn({13}, 4, DType::f64)}, {true, true}, "rms_norm[1,13]");
  // a transposed (non-contiguous) x; and 70 rows (several weight-gradient chunks)
  expect_gradcheck(fn, {core::transpose(randn({9, 4}, 5, DType::f64), 0, 1), randn({9}, 6, DType::f64)}, {true, true},
                   "rms_norm[4,9]T");
  expect_gradcheck(fn, {randn({70, 3}, 7, DType::f64), randn({3}, 8, DType::f64)}, {true, true}, "rms_norm[70,3]");
}

TEST(FusedRmsNorm, MatchesNaive) {
  for (DType dt : {DType::f64, DType::f32}) {
    const double eps = 1e-6;
    const Fn fused = [eps](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], eps); };
    const Fn naive = [eps](const std::vector<Tensor>& in) { return naive_rms_norm(in[0], in[1], eps); };
    expect_matches_naive(fused, naive, {randn({2, 9, 33}, 1, dt), randn({33}, 2, dt)}, {}, "rms_norm[2,9,33]");
    expect_matches_naive(fused, naive, {randn({600, 96}, 3, dt), randn({96}, 4, dt)}, {}, "rms_norm[600,96]");
    expect_matches_naive(fused, naive, {randn({5, 17}, 5, dt), randn({17}, 6, dt)}, {true, false},
                         "rms_norm[5,17] x only");
    expect_matches_naive(fused, naive, {randn({5, 17}, 5, dt), randn({17}, 6, dt)}, {false, true},
                         "rms_norm[5,17] weight only");
  }
}

TEST(FusedRmsNorm, WeightGradientIsDeterministic) {
  const Tensor x = randn({333, 64}, 1, DType::f32), w = randn({64}, 2, DType::f32);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> dw;
  for (int threads : {1, 3, 2}) {
    omp_set_num_threads(threads);
    const GradRun r = run_with_grad([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); }, {x, w},
                                {true, true});
    dw.push_back(r.grads[1].to_vector<float>());
  }
  omp_set_num_threads(saved);
  for (std::size_t i = 1; i < dw.size(); ++i) EXPECT_EQ(std::memcmp(dw[0].data(), dw[i].data(), dw[0].size() * 4), 0);
}

TEST(FusedRmsNorm, Errors) {
  EXPECT_THROW(rms_norm(randn({3, 4}, 1, DType::f32), randn({5}, 2, DType::f32), 1e-5), Error);
  EXPECT_THROW(rms_norm(randn({3, 4}, 1, DType::f32), randn({4}, 2, DType::f64), 1e-5), Error);
}

// ---------------------------------------------------------------------------------------
// rope

// cos / sin tables (1, T, 1, D/2) computed here in double, independently of the op.
Tensor rope_table(std::int64_t t_len, std::int64_t d, double theta, std::int64_t offset, bool sine, DType dtype) {
  std::vector<double> v;
  for (std::int64_t t = 0; t < t_len; ++t)
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double angle = static_cast<double>(t + offset) / std::pow(theta, 2.0 * i / d);
      v.push_back(sine ? std::sin(angle) : std::cos(angle));
    }
  return Tensor::from_vector(v, {1, t_len, 1, d / 2}).to(dtype);
}

Tensor naive_rope(const Tensor& x, double theta, std::int64_t offset) {
  const std::int64_t t_len = x.shape()[1], d = x.shape()[3];
  const Tensor c = rope_table(t_len, d, theta, offset, false, x.dtype());
  const Tensor s = rope_table(t_len, d, theta, offset, true, x.dtype());
  const Tensor x1 = slice(x, 3, 0, d / 2), x2 = slice(x, 3, d / 2, d);
  return concat({sub(mul(x1, c), mul(x2, s)), add(mul(x2, c), mul(x1, s))}, 3);
}

TEST(FusedRope, Gradcheck) {
  expect_gradcheck([](const std::vector<Tensor>& in) { return rope(in[0], 10000.0); },
                   {randn({2, 5, 3, 8}, 1, DType::f64)}, {true}, "rope[2,5,3,8]");
  expect_gradcheck([](const std::vector<Tensor>& in) { return rope(in[0], 500.0, 3); },
                   {core::permute(randn({1, 2, 7, 6}, 2, DType::f64), {0, 2, 1, 3})}, {true},
                   "rope[1,7,2,6] offset 3, permuted");
}

TEST(FusedRope, MatchesNaive) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (std::int64_t offset : {0, 5, 1000}) {
      const Fn fused = [offset](const std::vector<Tensor>& in) { return rope(in[0], 10000.0, offset); };
      const Fn naive = [offset](const std::vector<Tensor>& in) { return naive_rope(in[0], 10000.0, offset); };
      expect_matches_naive(fused, naive, {randn({2, 13, 3, 16}, 1, dt)}, {},
                           "rope[2,13,3,16] offset " + std::to_string(offset));
    }
    const Fn fused = [](const std::vector<Tensor>& in) { return rope(in[0], 500000.0); };
    const Fn naive = [](const std::vector<Tensor>& in) { return naive_rope(in[0], 500000.0, 0); };
    expect_matches_naive(fused, naive, {randn({1, 70, 2, 64}, 2, dt)}, {}, "rope[1,70,2,64] theta 5e5");
  }
}

// A layer's queries and keys rotated in one launch each way (rope_pair) get the bits of two
// rope calls, values and gradients, whichever of them wants a gradient.
TEST(FusedRope, APairHasTheBitsOfTwoRopes) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (const auto [q_grad, k_grad] : {std::pair{true, true}, std::pair{false, true}, std::pair{true, false}}) {
      const auto run = [&](bool paired) {
        Tensor q = randn({2, 5, 4, 8}, 1, dt), k = randn({2, 5, 2, 8}, 2, dt);
        q.set_requires_grad(q_grad);
        k.set_requires_grad(k_grad);
        RopedPair r{};
        if (paired)
          r = rope_pair(q, k, 500.0, 3);
        else
          r = {rope(q, 500.0, 3), rope(k, 500.0, 3)};
        backward(add(sum(mul(r.q, randn({2, 5, 4, 8}, 3, dt))), sum(mul(r.k, randn({2, 5, 2, 8}, 4, dt)))));
        return std::vector<std::vector<double>>{values(r.q), values(r.k),
                                                q_grad ? values(q.grad()) : std::vector<double>{},
                                                k_grad ? values(k.grad()) : std::vector<double>{}};
      };
      EXPECT_EQ(run(true), run(false)) << dtype_name(dt) << " q grad " << q_grad << ", k grad " << k_grad;
    }
  }
  EXPECT_THROW(rope_pair(randn({2, 5, 4, 8}, 1, DType::f32), randn({2, 4, 2, 8}, 2, DType::f32), 500.0), Error);
  EXPECT_THROW(rope_pair(randn({2, 5, 4, 8}, 1, DType::f32), randn({2, 5, 2, 8}, 2, DType::f64), 500.0), Error);
}

TEST(FusedRope, PositionZeroIsIdentityAndErrors) {
  const Tensor x = randn({1, 1, 2, 8}, 1, DType::f32);
  EXPECT_EQ(values(rope(x, 10000.0)), values(x));
  EXPECT_THROW(rope(randn({1, 3, 2, 7}, 1, DType::f32), 10000.0), Error);  // odd D
  EXPECT_THROW(rope(randn({3, 2, 8}, 1, DType::f32), 10000.0), Error);     // not 4-D
}

// ---------------------------------------------------------------------------------------
// flash_attention

// softmax(q k^T * scale + mask) v with the kv heads expanded for grouped-query attention.
// real: (B, S) key padding mask as 0 / 1 (empty = none). window > 0: query i also does not
// see keys j <= i + (S - T) - window. Hidden scores (causal, outside the window or padded)
// are -inf; a row with no visible key is left unmasked and its output multiplied by 0 (so
// it is 0 with zero gradient, as the fused op defines).
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                       const std::vector<std::int32_t>& real = {}, std::int64_t window = 0) {
  const std::int64_t b = q.shape()[0], t = q.shape()[1], hq = q.shape()[2], d = q.shape()[3];
  const std::int64_t s = k.shape()[1], hkv = k.shape()[2], group = hq / hkv;
  const Tensor qh = permute(q, {0, 2, 1, 3});  // (B, Hq, T, D)
  Tensor kh = permute(k, {0, 2, 1, 3});        // (B, Hkv, S, D)
  Tensor vh = permute(v, {0, 2, 1, 3});
  if (group > 1) {
    kh = reshape(expand(unsqueeze(kh, 2), {b, hkv, group, s, d}), {b, hq, s, d});
    vh = reshape(expand(unsqueeze(vh, 2), {b, hkv, group, s, d}), {b, hq, s, d});
  }
  Tensor scores = mul_scalar(matmul(qh, kh, false, true), scale);  // (B, Hq, T, S)
  std::vector<double> hidden, sees;  // (B, 1, T, S) and (B, 1, T, 1)
  for (std::int64_t bb = 0; bb < b; ++bb)
    for (std::int64_t i = 0; i < t; ++i) {
      std::vector<double> row;
      for (std::int64_t j = 0; j < s; ++j)
        row.push_back((causal && j > i + (s - t)) || (window > 0 && j <= i + (s - t) - window) ||
                              (!real.empty() && real[bb * s + j] == 0)
                          ? 1.0
                          : 0.0);
      const bool any = std::find(row.begin(), row.end(), 0.0) != row.end();
      if (!any) std::fill(row.begin(), row.end(), 0.0);
      hidden.insert(hidden.end(), row.begin(), row.end());
      sees.push_back(any ? 1.0 : 0.0);
    }
  scores = masked_fill(scores, Tensor::from_vector(hidden, {b, 1, t, s}), -INFINITY);
  const Tensor out = mul(matmul(softmax(scores, -1), vh), Tensor::from_vector(sees, {b, 1, t, 1}).to(q.dtype()));
  return permute(out, {0, 2, 1, 3});
}

struct AttentionCase {
  std::int64_t b, t, s, hq, hkv, d;
  bool causal;
  std::string name() const {
    return "attention[B" + std::to_string(b) + " T" + std::to_string(t) + " S" + std::to_string(s) + " Hq" +
           std::to_string(hq) + " Hkv" + std::to_string(hkv) + " D" + std::to_string(d) + (causal ? " causal]" : "]");
  }
  std::vector<Tensor> inputs(DType dt, std::uint64_t stream = 1) const {
    return {randn({b, t, hq, d}, stream, dt), randn({b, s, hkv, d}, stream + 1, dt),
            randn({b, s, hkv, d}, stream + 2, dt)};
  }
};

Fn fused_attention_fn(bool causal, double scale) {
  return [=](const std::vector<Tensor>& in) { return flash_attention(in[0], in[1], in[2], causal, scale); };
}
Fn naive_attention_fn(bool causal, double scale) {
  return [=](const std::vector<Tensor>& in) { return naive_attention(in[0], in[1], in[2], causal, scale); };
}
Fn masked_attention_fn(bool causal, double scale, const Tensor& mask) {
  return [=](const std::vector<Tensor>& in) { return flash_attention(in[0], in[1], in[2], causal, scale, mask); };
}
Fn masked_naive_attention_fn(bool causal, double scale, const std::vector<std::int32_t>& real) {
  return [=](const std::vector<Tensor>& in) { return naive_attention(in[0], in[1], in[2], causal, scale, real); };
}

bool same_bits(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}
bool same_bits(const Tensor& a, const Tensor& b) { return same_bits(values(a), values(b)); }

// values(x) at the positions (axis 1 of (B, L, ...)) where `keep` is nonzero.
std::vector<double> rows_where(const Tensor& x, const std::vector<std::int32_t>& keep) {
  const std::vector<double> a = values(x);
  const std::size_t row = a.size() / keep.size();
  std::vector<double> kept;
  for (std::size_t p = 0; p < keep.size(); ++p)
    if (keep[p] != 0) kept.insert(kept.end(), a.begin() + p * row, a.begin() + (p + 1) * row);
  return kept;
}

TEST(FusedFlashAttention, Gradcheck) {
  const std::vector<AttentionCase> cases = {
      {1, 13, 13, 4, 2, 8, false}, {1, 13, 13, 4, 2, 8, true},  // GQA, odd sizes
      {1, 70, 70, 2, 1, 4, true},                                // two query and two key tiles
      {2, 5, 13, 2, 2, 8, true},   {1, 5, 13, 2, 1, 8, false},   // T < S (cached prefix)
      {1, 9, 4, 2, 1, 4, true},                                  // T > S: rows 0..4 see no key
  };
  for (const AttentionCase& c : cases)
    expect_gradcheck(fused_attention_fn(c.causal, 0.37), c.inputs(DType::f64), {true, true, true}, c.name());
  // strided q (heads-major storage viewed as (B, T, H, D)) and k with non-unit stride on D
  const Tensor q = core::permute(randn({1, 2, 11, 8}, 7, DType::f64), {0, 2, 1, 3});
  const Tensor k = core::transpose(randn({1, 11, 8, 2}, 8, DType::f64), 2, 3);
  expect_gradcheck(fused_attention_fn(true, 0.5), {q, k, randn({1, 11, 2, 8}, 9, DType::f64)}, {true, true, true},
                   "attention strided q, k");
}

TEST(FusedFlashAttention, MatchesNaive) {
  const std::vector<AttentionCase> cases = {
      {2, 13, 13, 4, 2, 8, false}, {2, 13, 13, 4, 2, 8, true},   {1, 70, 70, 2, 1, 16, true},
      {1, 70, 130, 4, 2, 8, true}, {1, 70, 130, 4, 2, 8, false}, {2, 129, 129, 2, 2, 32, true},
      {1, 1, 65, 2, 1, 8, true},  // one query (decoding step) against a cache
  };
  for (DType dt : {DType::f64, DType::f32})
    for (const AttentionCase& c : cases) {
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      expect_matches_naive(fused_attention_fn(c.causal, scale), naive_attention_fn(c.causal, scale), c.inputs(dt), {},
                           c.name());
    }
  // Only q differentiated (the backward skips nothing it needs).
  const AttentionCase c{1, 20, 20, 2, 1, 8, true};
  expect_matches_naive(fused_attention_fn(true, 0.3), naive_attention_fn(true, 0.3), c.inputs(DType::f64),
                       {true, false, false}, c.name() + " q only");
}

// q, k, v as views of one fused projection output (B, T, (Hq + 2 Hkv) * D), reshaped to
// (B, T, Hq + 2 Hkv, D) and sliced along the head axis: the kernel reads them in place.
TEST(FusedFlashAttention, FusedProjectionViews) {
  for (DType dt : {DType::f64, DType::f32}) {
    const std::int64_t b = 2, t = 37, hq = 4, hkv = 2, d = 16;
    const Tensor qkv = randn({b, t, (hq + 2 * hkv) * d}, 3, dt);
    const auto split_then = [=](const Fn& attention) {
      return Fn([=](const std::vector<Tensor>& in) {
        const Tensor heads = reshape(in[0], {b, t, hq + 2 * hkv, d});
        return attention(
            {slice(heads, 2, 0, hq), slice(heads, 2, hq, hq + hkv), slice(heads, 2, hq + hkv, hq + 2 * hkv)});
      });
    };
    {
      NoGradGuard no_grad;
      const Tensor q = core::slice(core::reshape(qkv, {b, t, hq + 2 * hkv, d}), 2, 0, hq);
      EXPECT_FALSE(q.is_contiguous());
      EXPECT_TRUE(q.shares_storage(qkv));  // a view: the op reads it without a copy
    }
    expect_matches_naive(split_then(fused_attention_fn(true, 0.25)), split_then(naive_attention_fn(true, 0.25)), {qkv},
                         {}, "attention from qkv views");
  }
}

// T > S with the causal mask: rows t < T - S see no key and give 0 (zero gradient); the
// other rows equal causal attention of q[T - S:] against all keys.
TEST(FusedFlashAttention, RowsWithoutKeys) {
  const std::int64_t t = 9, s = 4;
  const std::vector<Tensor> in = AttentionCase{1, t, s, 2, 1, 8, true}.inputs(DType::f64);
  const GradRun fused = run_with_grad(fused_attention_fn(true, 0.4), in, {true, true, true});
  const std::vector<double> out = values(fused.out), dq = values(fused.grads[0]);
  for (std::int64_t i = 0; i < (t - s) * 2 * 8; ++i) {
    EXPECT_EQ(out[i], 0.0);
    EXPECT_EQ(dq[i], 0.0);
  }
  const Tensor tail = naive_attention(slice(in[0], 1, t - s, t), in[1], in[2], true, 0.4);
  expect_close(slice(fused.out, 1, t - s, t), tail, 1e-12, 1e-12, "rows that see keys");
}

TEST(FusedFlashAttention, Errors) {
  const Tensor q = randn({1, 4, 3, 8}, 1, DType::f32), k = randn({1, 4, 2, 8}, 2, DType::f32);
  EXPECT_THROW(flash_attention(q, k, k, false, 1.0), Error);  // 3 % 2 != 0
  EXPECT_THROW(flash_attention(q, randn({1, 4, 3, 4}, 2, DType::f32), randn({1, 4, 3, 4}, 2, DType::f32), false, 1.0),
               Error);  // D mismatch
  EXPECT_THROW(flash_attention(q, randn({1, 4, 1, 8}, 2, DType::f32), randn({1, 5, 1, 8}, 2, DType::f32), false, 1.0),
               Error);  // k / v shapes
  // key_mask must be (B, S): S = 6 keys here, T = 4 queries
  const Tensor k6 = randn({1, 6, 1, 8}, 3, DType::f32);
  for (const Tensor& mask : {Tensor::ones({1, 4}, DType::i32), Tensor::ones({2, 6}, DType::i32),
                             Tensor::ones({6}, DType::f32), Tensor::ones({1, 6, 1}, DType::i64)})
    testing::expect_error([&] { flash_attention(q, k6, k6, true, 1.0, mask); },
                          {"flash_attention", "key_mask", mask.describe(), q.describe(), k6.describe()});
}

TEST(FusedFlashAttention, MaskedGradcheck) {
  const std::vector<AttentionCase> cases = {
      {1, 13, 13, 4, 2, 8, false}, {1, 13, 13, 4, 2, 8, true},  // GQA, odd sizes
      {1, 70, 70, 2, 1, 4, true},                                // two query and two key tiles
      {2, 5, 13, 2, 2, 8, true},                                 // T < S (cached prefix)
      {1, 9, 4, 2, 1, 4, true},                                  // T > S: rows 0..4 see no key
  };
  for (const AttentionCase& c : cases)
    for (const Padding kind : kPaddings) {
      const Tensor mask = mask_tensor(padding_mask(kind, c.b, c.s), c.b);
      expect_gradcheck(masked_attention_fn(c.causal, 0.37, mask), c.inputs(DType::f64, 11), {true, true, true},
                       c.name() + padding_name(kind));
    }
}

TEST(FusedFlashAttention, MaskedMatchesNaive) {
  const std::vector<AttentionCase> cases = {
      {2, 13, 13, 4, 2, 8, false}, {2, 13, 13, 4, 2, 8, true},   {1, 70, 130, 4, 2, 8, true},
      {2, 70, 130, 4, 2, 8, false}, {2, 129, 129, 2, 2, 32, true}, {2, 9, 4, 2, 1, 4, true},
      {2, 1, 65, 2, 1, 8, true},  // one query (decoding step) against a padded cache
  };
  for (DType dt : {DType::f64, DType::f32})
    for (const AttentionCase& c : cases)
      for (const Padding kind : kPaddings) {
        const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
        const std::vector<std::int32_t> real = padding_mask(kind, c.b, c.s);
        expect_matches_naive(masked_attention_fn(c.causal, scale, mask_tensor(real, c.b)),
                             masked_naive_attention_fn(c.causal, scale, real), c.inputs(dt, 21), {},
                             c.name() + padding_name(kind));
      }
}

// Rows (B, S, H, D) of x at positions where `real` is 0 set to 60 + small offsets: scores far
// above the real ones if they were not masked.
Tensor change_padded(const Tensor& x, const std::vector<std::int32_t>& real) {
  std::vector<double> a = values(x);
  const std::int64_t row = x.shape()[2] * x.shape()[3];
  for (std::size_t p = 0; p < real.size(); ++p)
    if (real[p] == 0)
      for (std::int64_t i = 0; i < row; ++i) a[p * row + i] = 60.0 + static_cast<double>((p + i) % 3);
  return Tensor::from_vector(a, x.shape()).to(x.dtype());
}

// Whatever (finite) k and v hold at padded positions, every output and gradient keeps its
// bits, and padded keys get dk = dv = 0 exactly. Queries at padded positions are still
// computed: changing q there changes only their own outputs.
TEST(FusedFlashAttention, PaddedKeysAreInert) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool causal : {true, false})
      for (const Padding kind : {Padding::left, Padding::holes}) {
        const AttentionCase c{2, 150, 150, 4, 2, 16, causal};
        const std::string tag = c.name() + padding_name(kind) + " " + dtype_name(dt);
        const std::vector<std::int32_t> real = padding_mask(kind, c.b, c.s);
        const Fn fn = masked_attention_fn(causal, 0.25, mask_tensor(real, c.b));
        const std::vector<Tensor> in = c.inputs(dt, 31);
        const GradRun a = run_with_grad(fn, in, {true, true, true});
        const GradRun b = run_with_grad(fn, {in[0], change_padded(in[1], real), change_padded(in[2], real)},
                                        {true, true, true});
        EXPECT_TRUE(same_bits(a.out, b.out)) << tag;
        for (std::size_t j = 0; j < 3; ++j) EXPECT_TRUE(same_bits(a.grads[j], b.grads[j])) << tag << " grad " << j;
        std::vector<std::int32_t> padded(real.size());
        for (std::size_t p = 0; p < real.size(); ++p) padded[p] = 1 - real[p];
        for (std::size_t j = 1; j < 3; ++j)
          for (const double g : rows_where(a.grads[j], padded)) ASSERT_EQ(g, 0.0) << tag << " grad " << j;
        const Tensor moved = fn({change_padded(in[0], real), change_padded(in[1], real), change_padded(in[2], real)});
        EXPECT_TRUE(same_bits(rows_where(a.out, real), rows_where(moved, real))) << tag << " with q changed too";
      }
}

// An all-ones mask of any dtype gives the bits of no mask, and a mask's dtype and nonzero
// values do not matter (nonzero = real key). T < S too.
TEST(FusedFlashAttention, MaskValuesAndDtypes) {
  const AttentionCase cases[] = {{2, 150, 150, 4, 2, 16, true}, {2, 150, 150, 4, 2, 16, false},
                                 {2, 40, 150, 4, 2, 16, true}};
  for (const AttentionCase& c : cases) {
    const std::vector<Tensor> in = c.inputs(DType::f32, 41);
    const GradRun plain = run_with_grad(fused_attention_fn(c.causal, 0.25), in, {true, true, true});
    const std::vector<std::int32_t> holes = padding_mask(Padding::holes, c.b, c.s);
    const GradRun holed = run_with_grad(masked_attention_fn(c.causal, 0.25, mask_tensor(holes, c.b)), in,
                                        {true, true, true});
    for (const DType mt : {DType::i32, DType::i64, DType::f32, DType::f64}) {
      const std::string tag = c.name() + " mask " + dtype_name(mt);
      const double value = mt == DType::f64 ? 0.5 : mt == DType::i64 ? -3.0 : 2.0;
      const GradRun ones = run_with_grad(masked_attention_fn(c.causal, 0.25, Tensor::full({c.b, c.s}, value, mt)), in,
                                         {true, true, true});
      std::vector<double> scaled(holes.begin(), holes.end());
      for (double& x : scaled) x *= value;
      const GradRun other = run_with_grad(
          masked_attention_fn(c.causal, 0.25, Tensor::from_vector(scaled, {c.b, c.s}).to(mt)), in, {true, true, true});
      EXPECT_TRUE(same_bits(plain.out, ones.out)) << tag;
      EXPECT_TRUE(same_bits(holed.out, other.out)) << tag;
      for (std::size_t j = 0; j < 3; ++j) {
        EXPECT_TRUE(same_bits(plain.grads[j], ones.grads[j])) << tag << " grad " << j;
        EXPECT_TRUE(same_bits(holed.grads[j], other.grads[j])) << tag << " grad " << j;
      }
    }
  }
}

// Queries that see no real key (left padding with the causal mask; a batch row whose keys
// are all padded) give exactly 0 and zero dq; nothing is NaN or inf, even with scores in the
// thousands.
TEST(FusedFlashAttention, QueriesWithoutRealKeys) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool causal : {true, false})
      for (double scale : {0.3, 300.0}) {
        const AttentionCase c{2, 150, 150, 2, 1, 8, causal};
        std::vector<std::int32_t> real = padding_mask(Padding::left, c.b, c.s);  // batch 0 from t = 50
        std::fill(real.begin() + c.s, real.end(), 0);                             // batch 1: no real key
        const std::string tag = c.name() + " scale " + std::to_string(scale) + " " + dtype_name(dt);
        const GradRun r = run_with_grad(masked_attention_fn(causal, scale, mask_tensor(real, c.b)), c.inputs(dt, 51),
                                        {true, true, true});
        for (const Tensor& x : {r.out, r.grads[0], r.grads[1], r.grads[2]})
          for (const double e : values(x)) ASSERT_TRUE(std::isfinite(e)) << tag;
        std::vector<std::int32_t> empty(real.size(), 0);  // queries that see no real key
        for (std::int64_t t = 0; t < c.t; ++t) {
          empty[t] = causal && t < c.s / 3;
          empty[c.t + t] = 1;
        }
        for (const double x : rows_where(r.out, empty)) ASSERT_EQ(x, 0.0) << tag;
        for (const double x : rows_where(r.grads[0], empty)) ASSERT_EQ(x, 0.0) << tag;
        for (std::size_t j = 1; j < 3; ++j)
          for (const double g : values(slice(r.grads[j], 0, 1, 2))) ASSERT_EQ(g, 0.0) << tag << " grad " << j;
      }
}

// Replaces positions > t of x (B, L, H, D) with other values.
Tensor change_after(const Tensor& x, std::int64_t t, std::uint64_t stream) {
  std::vector<double> a = values(x);
  const std::vector<double> r = values(randn(x.shape(), stream, DType::f64));
  const std::int64_t row = x.shape()[2] * x.shape()[3], len = x.shape()[1];
  for (std::int64_t b = 0; b < x.shape()[0]; ++b)
    for (std::int64_t i = (b * len + t + 1) * row; i < (b + 1) * len * row; ++i) a[i] = 3.0 * r[i];
  return Tensor::from_vector(a, x.shape()).to(x.dtype());
}

// Causal outputs up to t keep their bits when q, k, v after t change; with `masked`, a
// holes mask that is also flipped after t in the changed run.
TEST(FusedFlashAttention, CausalPrefixIsBitIdentical) {
  const AttentionCase c{2, 200, 200, 4, 2, 16, true};
  const std::vector<Tensor> in = c.inputs(DType::f32, 61);
  for (const bool masked : {false, true})
    for (const std::int64_t t : {13, 63, 64, 130}) {
      const std::vector<Tensor> changed = {change_after(in[0], t, 71), change_after(in[1], t, 72),
                                           change_after(in[2], t, 73)};
      Tensor mask, changed_mask;
      if (masked) {
        std::vector<std::int32_t> real = padding_mask(Padding::holes, c.b, c.s);
        mask = mask_tensor(real, c.b);
        for (std::int64_t b = 0; b < c.b; ++b)
          for (std::int64_t j = t + 1; j < c.s; ++j) real[b * c.s + j] = 1 - real[b * c.s + j];
        changed_mask = mask_tensor(real, c.b);
      }
      const Tensor a = flash_attention(in[0], in[1], in[2], true, 0.25, mask);
      const Tensor b = flash_attention(changed[0], changed[1], changed[2], true, 0.25, changed_mask);
      std::vector<std::int32_t> prefix(c.b * c.t, 0), next(c.b * c.t, 0);
      for (std::int64_t bb = 0; bb < c.b; ++bb) {
        std::fill(prefix.begin() + bb * c.t, prefix.begin() + bb * c.t + t + 1, 1);
        next[bb * c.t + t + 1] = 1;
      }
      EXPECT_TRUE(same_bits(rows_where(a, prefix), rows_where(b, prefix)))
          << c.name() << (masked ? " masked" : "") << " prefix up to t=" << t << " changed";
      EXPECT_FALSE(same_bits(rows_where(a, next), rows_where(b, next))) << "position t+1 should change";
    }
}

// Same bits for dq, dk, dv across runs and thread counts (3 threads take the split schedule
// for these 4 (batch, kv head) tasks, 1, 2 and 4 threads the fused one), without and with
// key padding masks.
TEST(FusedFlashAttention, BackwardDeterministic) {
  const std::vector<Tensor> in = AttentionCase{2, 200, 200, 4, 2, 32, true}.inputs(DType::f32);
  const int saved = omp_get_max_threads();
  for (const Tensor& mask : {Tensor(), mask_tensor(padding_mask(Padding::holes, 2, 200), 2),
                             mask_tensor(padding_mask(Padding::left, 2, 200), 2)}) {
    std::vector<std::vector<float>> runs;
    for (int threads : {3, 3, 1, 2, 4}) {
      omp_set_num_threads(threads);
      const GradRun r = run_with_grad(masked_attention_fn(true, 0.125, mask), in, {true, true, true});
      std::vector<float> bits = r.out.to_vector<float>();
      for (const Tensor& g : r.grads) {
        const std::vector<float> gv = g.to_vector<float>();
        bits.insert(bits.end(), gv.begin(), gv.end());
      }
      runs.push_back(bits);
    }
    omp_set_num_threads(saved);
    for (std::size_t i = 1; i < runs.size(); ++i) {
      ASSERT_EQ(runs[i].size(), runs[0].size());
      EXPECT_EQ(std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * sizeof(float)), 0)
          << "run " << i << (mask.defined() ? " masked" : "");
    }
  }
}

// Peak CPU allocator bytes during forward + backward at T = S = 2048, D = 64, one head.
// Everything the op allocates is a small multiple of T * D (output, logsumexp, D_i, dq, dk,
// dv, and the tape's copies of the gradients into the leaves' .grad); the bound asserted is
// 10 * T * D * 4 bytes = 5 MiB, while a single T x S float32 score matrix is 16 MiB.
TEST(FusedFlashAttention, MemoryIsLinearInSequenceLength) {
  const std::int64_t t = 2048, d = 64;
  for (bool causal : {false, true}) {
    const std::vector<Tensor> in = AttentionCase{1, t, t, 1, 1, d, causal}.inputs(DType::f32);
    std::vector<Tensor> leaves;
    for (const Tensor& x : in) leaves.push_back(x.detach().set_requires_grad(true));
    const Tensor dout = randn({1, t, 1, d}, 9, DType::f32);
    CachingAllocator& alloc = allocator_for(Device::cpu());
    // Ballast: make bytes in use equal the peak so far, so any new peak is our increase.
    const AllocatorStats before = alloc.stats();
    const std::size_t gap = before.peak_bytes_in_use - before.bytes_in_use;
    Tensor ballast = gap > 0 ? Tensor::empty({static_cast<std::int64_t>(gap / 4 + 1)}, DType::f32) : Tensor();
    const std::size_t base = alloc.stats().peak_bytes_in_use;
    ASSERT_EQ(base, alloc.stats().bytes_in_use);
    {
      Tensor out = flash_attention(leaves[0], leaves[1], leaves[2], causal, 0.125);
      backward(out, dout);
    }
    const std::size_t increase = alloc.stats().peak_bytes_in_use - base;
    const std::size_t bound = 10 * t * d * 4, scores = t * t * 4;
    std::cout << "[ memory   ] flash_attention fwd+bwd T=S=" << t << " D=" << d << (causal ? " causal" : "")
              << ": peak increase " << increase / 1024 << " KiB (bound " << bound / 1024
              << " KiB; one T x S f32 matrix " << scores / 1024 << " KiB)\n";
    EXPECT_LT(increase, bound);
    for (const Tensor& x : leaves) EXPECT_TRUE(x.grad().defined());
  }
}

// Speed, printed only (scripts/bench.sh is where speed is measured): fwd + bwd of the
// fused op against the naive composition at B=4, T=256, H=4, D=64, float32, causal.
TEST(FusedFlashAttention, TimingAgainstNaive) {
  const std::vector<Tensor> in = AttentionCase{4, 256, 256, 4, 4, 64, true}.inputs(DType::f32);
  std::vector<Tensor> leaves;
  for (const Tensor& x : in) leaves.push_back(x.detach().set_requires_grad(true));
  const Tensor dout = randn(in[0].shape(), 9, DType::f32);
  auto time_ms = [&](const Fn& fn) {
    double best = 1e30;
    for (int rep = 0; rep < 6; ++rep) {
      for (Tensor& x : leaves) x.zero_grad();
      const auto start = std::chrono::steady_clock::now();
      backward(fn(leaves), dout);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (rep > 0) best = std::min(best, ms);  // the first run warms caches and the allocator
    }
    return best;
  };
  const double fused = time_ms(fused_attention_fn(true, 0.125));
  const double naive = time_ms(naive_attention_fn(true, 0.125));
  std::cout << "[ timing   ] flash_attention fwd+bwd B=4 T=256 H=4 D=64 f32 causal, " << omp_get_max_threads()
            << " threads: fused " << fused << " ms, naive " << naive << " ms, speed-up " << naive / fused << "x\n";
}

// ---------------------------------------------------------------------------------------
// flash_attention with a sliding window

Fn window_attention_fn(double scale, std::int64_t window, const Tensor& mask = Tensor()) {
  return [=](const std::vector<Tensor>& in) { return flash_attention(in[0], in[1], in[2], true, scale, mask, window); };
}
Fn window_naive_attention_fn(double scale, std::int64_t window, const std::vector<std::int32_t>& real = {}) {
  return [=](const std::vector<Tensor>& in) { return naive_attention(in[0], in[1], in[2], true, scale, real, window); };
}
std::string window_name(const AttentionCase& c, std::int64_t window) {
  return c.name() + " window " + std::to_string(window);
}

TEST(FusedFlashAttentionWindow, Gradcheck) {
  struct Case {
    AttentionCase c;
    std::vector<std::int64_t> windows;
  };
  const std::vector<Case> cases = {
      {{1, 13, 13, 4, 2, 8, true}, {1, 3, 12}},  // GQA, odd sizes; W = 1, 3, T - 1
      {{1, 70, 70, 2, 1, 4, true}, {5}},         // two query tiles, the first key tile skipped
      {{2, 5, 13, 2, 2, 8, true}, {1, 3, 9}},    // T < S (cached prefix)
      {{1, 9, 4, 2, 1, 4, true}, {2}},           // T > S: rows 0..4 see no key
  };
  for (const Case& k : cases)
    for (const std::int64_t w : k.windows)
      expect_gradcheck(window_attention_fn(0.37, w), k.c.inputs(DType::f64), {true, true, true}, window_name(k.c, w));
  const AttentionCase c{2, 13, 13, 2, 1, 8, true};
  for (const Padding kind : kPaddings)
    expect_gradcheck(window_attention_fn(0.37, 4, mask_tensor(padding_mask(kind, c.b, c.s), c.b)),
                     c.inputs(DType::f64, 11), {true, true, true}, window_name(c, 4) + padding_name(kind));
}

// Sizes that are not multiples of the tiles (forward 64 x 128, backward 128 x 64; windows of
// at most 256 keys: spans of 32 queries or keys, backward segments of 1024 keys): windows
// that skip whole key tiles, straddle tile and segment edges, or cover everything.
TEST(FusedFlashAttentionWindow, MatchesNaive) {
  struct Case {
    AttentionCase c;
    std::vector<std::int64_t> windows;
  };
  const std::vector<Case> cases = {
      {{2, 300, 300, 4, 2, 16, true}, {1, 3, 100, 130, 299, 300, 1000}},
      {{1, 70, 330, 4, 2, 8, true}, {1, 3, 69, 70, 200, 329, 330}},  // S > T: a cached prefix of 260
      {{1, 1, 200, 2, 1, 8, true}, {1, 3, 64, 199}},                 // one decoding step
      {{2, 9, 4, 2, 1, 4, true}, {1, 2}},                             // T > S
      {{1, 2100, 2100, 2, 1, 8, true}, {5, 64, 256}},                 // three backward segments
      {{1, 900, 2200, 2, 1, 8, true}, {64, 256}},                     // ... with a cached prefix
  };
  for (DType dt : {DType::f64, DType::f32})
    for (const Case& k : cases)
      for (const std::int64_t w : k.windows) {
        const double scale = 1.0 / std::sqrt(static_cast<double>(k.c.d));
        expect_matches_naive(window_attention_fn(scale, w), window_naive_attention_fn(scale, w), k.c.inputs(dt), {},
                             window_name(k.c, w));
      }
}

TEST(FusedFlashAttentionWindow, MaskedMatchesNaive) {
  const std::vector<AttentionCase> cases = {
      {2, 150, 150, 4, 2, 8, true}, {2, 70, 200, 2, 1, 8, true}, {1, 1300, 1300, 2, 1, 8, true}};
  for (DType dt : {DType::f64, DType::f32})
    for (const AttentionCase& c : cases)
      for (const std::int64_t w : {3, 40, 149})
        for (const Padding kind : kPaddings) {
          const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
          const std::vector<std::int32_t> real = padding_mask(kind, c.b, c.s);
          expect_matches_naive(window_attention_fn(scale, w, mask_tensor(real, c.b)),
                               window_naive_attention_fn(scale, w, real), c.inputs(dt, 21), {},
                               window_name(c, w) + padding_name(kind));
        }
}

// W >= S hides nothing: the same bits as no window (T == S and S > T), forward and backward.
TEST(FusedFlashAttentionWindow, WindowOfAtLeastSIsNoWindow) {
  for (const AttentionCase& c : {AttentionCase{2, 300, 300, 4, 2, 16, true}, AttentionCase{1, 70, 330, 4, 2, 8, true}})
    for (DType dt : {DType::f32, DType::f64}) {
      const std::vector<Tensor> in = c.inputs(dt);
      const GradRun none = run_with_grad(window_attention_fn(0.25, 0), in, {true, true, true});
      for (const std::int64_t w : {c.s, c.s + 1, std::int64_t{1} << 40}) {
        const GradRun windowed = run_with_grad(window_attention_fn(0.25, w), in, {true, true, true});
        EXPECT_TRUE(same_bits(windowed.out, none.out)) << window_name(c, w);
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(windowed.grads[i], none.grads[i])) << window_name(c, w);
      }
    }
}

// Rows whose whole window is padded (left padding longer than the window) give exactly 0
// and zero dq; keys no query's window reaches (S > T) get dk = dv = 0.
TEST(FusedFlashAttentionWindow, RowsAndKeysOutsideEveryWindow) {
  const std::int64_t t = 40, s = 40, w = 3;
  const std::vector<std::int32_t> real = padding_mask(Padding::left, 1, s);
  const std::int64_t pad = std::find(real.begin(), real.end(), 1) - real.begin();
  ASSERT_GT(pad, w) << "the test needs left padding longer than the window";
  const std::vector<Tensor> in = AttentionCase{1, t, s, 2, 1, 8, true}.inputs(DType::f64);
  const GradRun r = run_with_grad(window_attention_fn(0.4, w, mask_tensor(real, 1)), in, {true, true, true});
  const std::vector<double> out = values(r.out), dq = values(r.grads[0]);
  for (std::int64_t i = 0; i < pad * 2 * 8; ++i) {
    ASSERT_EQ(out[i], 0.0) << i;
    ASSERT_EQ(dq[i], 0.0) << i;
  }
  // S > T: queries 0..T-1 sit at positions S-T..S-1, so keys < S - T - W + 1 are unseen.
  const AttentionCase c{1, 10, 50, 2, 1, 8, true};
  const GradRun p = run_with_grad(window_attention_fn(0.4, 5), c.inputs(DType::f64), {true, true, true});
  const std::vector<double> dk = values(p.grads[1]), dv = values(p.grads[2]);
  const std::int64_t unseen = c.s - c.t - 5 + 1;
  for (std::int64_t i = 0; i < unseen * c.hkv * c.d; ++i) {
    ASSERT_EQ(dk[i], 0.0) << i;
    ASSERT_EQ(dv[i], 0.0) << i;
  }
  EXPECT_NE(dk[unseen * c.hkv * c.d], 0.0);
}

TEST(FusedFlashAttentionWindow, Errors) {
  const Tensor q = randn({1, 4, 2, 8}, 1, DType::f32), k = randn({1, 4, 1, 8}, 2, DType::f32);
  testing::expect_error([&] { flash_attention(q, k, k, /*causal=*/false, 1.0, Tensor(), 3); },
                        {"flash_attention", "window", "causal"});
  testing::expect_error([&] { flash_attention(q, k, k, true, 1.0, Tensor(), -1); }, {"flash_attention", "window", "-1"});
}

// Same bits across runs and thread counts (window 300, 3 threads: the split backward
// schedule, 1, 2, 4: the fused one; window 70: spans, over two segments at T = 1500), with
// and without a key mask.
TEST(FusedFlashAttentionWindow, BackwardDeterministic) {
  const std::vector<Tensor> in = AttentionCase{2, 1500, 1500, 4, 2, 32, true}.inputs(DType::f32);
  const int saved = omp_get_max_threads();
  for (const std::int64_t window : {70, 300}) {
    for (const Tensor& mask : {Tensor(), mask_tensor(padding_mask(Padding::holes, 2, 1500), 2)}) {
      std::vector<std::vector<float>> runs;
      for (int threads : {3, 3, 1, 2, 4}) {
        omp_set_num_threads(threads);
        const GradRun r = run_with_grad(window_attention_fn(0.125, window, mask), in, {true, true, true});
        std::vector<float> bits = r.out.to_vector<float>();
        for (const Tensor& g : r.grads) {
          const std::vector<float> gv = g.to_vector<float>();
          bits.insert(bits.end(), gv.begin(), gv.end());
        }
        runs.push_back(bits);
      }
      omp_set_num_threads(saved);
      for (std::size_t i = 1; i < runs.size(); ++i) {
        ASSERT_EQ(runs[i].size(), runs[0].size());
        EXPECT_EQ(std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * sizeof(float)), 0)
            << "window " << window << ", run " << i << (mask.defined() ? " masked" : "");
      }
    }
  }
}

// The backward kernel with accumulate adds its gradients to what dq, dk, dv hold (the exact
// window's features put theirs there first): X + the written gradients, for the grid (no
// window; window 300) and the spans (window 70, three segments), with and without a mask.
TEST(FusedFlashAttentionWindow, BackwardAccumulateAddsToTheGradientsThere) {
  const AttentionCase c{2, 2100, 2100, 4, 2, 8, true};
  const std::vector<Tensor> in = c.inputs(DType::f64, 41);
  const Tensor dout = randn(in[0].shape(), 44, DType::f64);
  const auto& forward = kernels::flash_attention_forward().get(DeviceType::cpu, DType::f64);
  const auto& backward = kernels::flash_attention_backward().get(DeviceType::cpu, DType::f64);
  for (const std::int64_t window : {0, 70, 300})
    for (const Tensor& mask : {Tensor(), mask_tensor(padding_mask(Padding::holes, c.b, c.s), c.b)}) {
      const std::string name = window_name(c, window) + (mask.defined() ? " masked" : "");
      Tensor out = Tensor::empty(in[0].shape(), DType::f64, Device::cpu());
      Tensor lse = Tensor::empty({c.b, c.hq, c.t}, DType::f64, Device::cpu());
      forward(in[0], in[1], in[2], mask, out, lse, true, 0.3, window);
      std::vector<Tensor> written, added, there;
      for (int i = 0; i < 3; ++i) {
        written.push_back(Tensor::empty(in[i].shape(), DType::f64, Device::cpu()));
        there.push_back(randn(in[i].shape(), 50 + i, DType::f64));
        added.push_back(there[i].clone());
      }
      backward(in[0], in[1], in[2], mask, out, lse, dout, Tensor(), written[0], written[1], written[2], true, 0.3,
               window, /*accumulate=*/false);
      backward(in[0], in[1], in[2], mask, out, lse, dout, Tensor(), added[0], added[1], added[2], true, 0.3, window,
               /*accumulate=*/true);
      for (int i = 0; i < 3; ++i)
        expect_close(added[i], add(there[i], written[i]), 1e-12, 1e-12, name + " gradient " + std::to_string(i));
    }
}

// Decoding through SoftmaxAttention with a window (a prefill longer than the window, then
// single tokens and a short chunk) equals the windowed forward pass; the key/value cache
// never holds more than the window.
TEST(FusedFlashAttentionWindow, DecodingEqualsTheForwardPass) {
  const std::int64_t hq = 4, hkv = 2, d = 8, len = 31;
  for (const std::int64_t w : {1, 3, 5, 40}) {
    nn::AttentionShape shape{hq, hkv, d, /*layer=*/0, DType::f64};
    shape.window = w;
    attention::SoftmaxAttention attn(shape);
    const Tensor q = randn({2, len, hq, d}, 31, DType::f64), k = randn({2, len, hkv, d}, 32, DType::f64),
                 v = randn({2, len, hkv, d}, 33, DType::f64);
    const Tensor full = attn.forward(q, k, v);
    expect_close(full, naive_attention(q, k, v, true, 1.0 / std::sqrt(double(d)), {}, w), 1e-12, 1e-12,
                 "forward, window " + std::to_string(w));
    std::unique_ptr<nn::DecodeState> state;
    std::vector<Tensor> parts;
    std::int64_t at = 0;
    for (const std::int64_t n : {9, 1, 1, 3, 1, 7, 1, 1, 1, 6}) {
      auto part = [&](const Tensor& x) { return slice(x, 1, at, at + n).contiguous(); };
      parts.push_back(attn.decode(part(q), part(k), part(v), state));
      at += n;
      const auto* cache = dynamic_cast<const attention::KeyValueCache*>(state.get());
      ASSERT_NE(cache, nullptr);
      EXPECT_EQ(cache->keys.size(1), std::min(at, w)) << "cache length after position " << at;
    }
    ASSERT_EQ(at, len);
    expect_close(concat(parts, 1), full, 1e-12, 1e-12, "decode vs forward, window " + std::to_string(w));
  }
}

// Speed, printed only: windowed (W = 512) against full causal flash attention at T = 4096,
// B = 1, H = 4, D = 64, float32, forward and forward + backward.
TEST(FusedFlashAttentionWindow, TimingAgainstFullCausal) {
  const std::vector<Tensor> in = AttentionCase{1, 4096, 4096, 4, 4, 64, true}.inputs(DType::f32);
  std::vector<Tensor> leaves;
  for (const Tensor& x : in) leaves.push_back(x.detach().set_requires_grad(true));
  const Tensor dout = randn(in[0].shape(), 9, DType::f32);
  auto time_ms = [&](std::int64_t window, bool with_backward) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      for (Tensor& x : leaves) x.zero_grad();
      const auto start = std::chrono::steady_clock::now();
      if (with_backward) {
        backward(flash_attention(leaves[0], leaves[1], leaves[2], true, 0.125, Tensor(), window), dout);
      } else {
        NoGradGuard no_grad;
        flash_attention(leaves[0], leaves[1], leaves[2], true, 0.125, Tensor(), window);
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (rep > 0) best = std::min(best, ms);
    }
    return best;
  };
  const double full_fwd = time_ms(0, false), win_fwd = time_ms(512, false);
  const double full_all = time_ms(0, true), win_all = time_ms(512, true);
  std::cout << "[ timing   ] flash_attention B=1 T=4096 H=4 D=64 f32 causal, " << omp_get_max_threads()
            << " threads: forward full " << full_fwd << " ms, window 512 " << win_fwd << " ms (" << full_fwd / win_fwd
            << "x); fwd+bwd full " << full_all << " ms, window 512 " << win_all << " ms (" << full_all / win_all
            << "x)\n";
}

// ---------------------------------------------------------------------------------------
// cross_entropy

// -mean over counted rows of log_softmax(logits)[n, target[n]], picked with index_select.
Tensor naive_cross_entropy(const Tensor& logits, const std::vector<std::int64_t>& targets, std::int64_t ignore_index) {
  const std::int64_t n = logits.shape()[0], v = logits.shape()[1];
  std::vector<std::int64_t> flat;
  for (std::int64_t r = 0; r < n; ++r)
    if (targets[r] != ignore_index) flat.push_back(r * v + targets[r]);
  const Tensor picked = index_select(reshape(log_softmax(logits, -1), {n * v}), 0,
                                     Tensor::from_vector(flat, {static_cast<std::int64_t>(flat.size())}));
  return neg(mean(picked));
}

std::vector<std::int64_t> draw_targets(std::int64_t n, std::int64_t v, std::int64_t ignore_every, std::int64_t ignore) {
  std::vector<std::int64_t> t;
  for (std::int64_t r = 0; r < n; ++r)
    t.push_back(ignore_every > 0 && r % ignore_every == 1 ? ignore : (r * 7919 + 3) % v);
  return t;
}

Tensor targets_tensor(const std::vector<std::int64_t>& t, DType dtype) {
  if (dtype == DType::i64) return Tensor::from_vector(t, {static_cast<std::int64_t>(t.size())});
  return Tensor::from_vector(std::vector<std::int32_t>(t.begin(), t.end()), {static_cast<std::int64_t>(t.size())});
}

TEST(FusedCrossEntropy, Gradcheck) {
  struct Case {
    std::int64_t n, v, ignore_every, ignore;
    DType index;
  };
  const std::vector<Case> cases = {
      {7, 11, 3, -100, DType::i64}, {5, 3, 0, -100, DType::i32}, {6, 13, 0, 2, DType::i64}};
  for (const Case& c : cases) {
    const Tensor targets = targets_tensor(draw_targets(c.n, c.v, c.ignore_every, c.ignore), c.index);
    expect_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets, c.ignore); },
                     {randn({c.n, c.v}, 1, DType::f64)}, {true},
                     "cross_entropy[" + std::to_string(c.n) + "," + std::to_string(c.v) + "]");
  }
}

TEST(FusedCrossEntropy, MatchesNaive) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (const auto& [n, v, every] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
             {37, 101, 4}, {16, 32000, 5}, {3, 2, 0}}) {
      const std::vector<std::int64_t> t = draw_targets(n, v, every, -100);
      const Tensor targets = targets_tensor(t, DType::i32);
      expect_matches_naive([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); },
                           [&](const std::vector<Tensor>& in) { return naive_cross_entropy(in[0], t, -100); },
                           {mul_scalar(randn({n, v}, 2, dt), 3.0)}, {},
                           "cross_entropy[" + std::to_string(n) + "," + std::to_string(v) + "]");
    }
  }
}

TEST(FusedCrossEntropy, AllIgnoredGivesZeroLossAndGradient) {
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor targets = targets_tensor({-100, -100, -100}, DType::i64);
    const GradRun r = run_with_grad([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); },
                                {randn({3, 5}, 1, dt)}, {true});
    EXPECT_EQ(r.out.item(), 0.0);
    for (double g : values(r.grads[0])) EXPECT_EQ(g, 0.0);
  }
}

TEST(FusedCrossEntropy, OutOfRangeTargetNamesRowAndValue) {
  const Tensor logits = randn({5, 11}, 1, DType::f32);
  try {
    cross_entropy(logits, targets_tensor({0, 1, -100, 11, 2}, DType::i64));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("target 11"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;
  }
  EXPECT_THROW(cross_entropy(logits, targets_tensor({0, 1, 2, -1, 2}, DType::i32)), Error);
  EXPECT_THROW(cross_entropy(logits, targets_tensor({0, 1, 2}, DType::i32)), Error);  // wrong N
}

// linear_cross_entropy: the LM head and the loss over chunks of rows, its gradients computed
// in the forward, against cross_entropy of the full logits (a random loss gradient, so the
// backward's scaling is checked too).

TEST(FusedLinearCrossEntropy, EqualsCrossEntropyOfTheFullLogits) {
  for (DType dt : {DType::f64, DType::f32})
    for (const auto& [n, d, v, chunk] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>>{
             {37, 9, 101, 0}, {37, 9, 101, 16}, {16, 24, 3000, 5}, {16, 24, 3000, 700}, {5, 4, 7, 1}}) {
      const std::vector<std::int64_t> t = draw_targets(n, v, 4, -100);
      const Tensor targets = targets_tensor(t, DType::i64);
      expect_matches_naive(
          [&](const std::vector<Tensor>& in) { return linear_cross_entropy(in[0], in[1], targets, -100, chunk); },
          [&](const std::vector<Tensor>& in) { return cross_entropy(matmul(in[0], in[1], false, true), targets); },
          {randn({n, d}, 3, dt), mul_scalar(randn({v, d}, 4, dt), 0.7)}, {},
          "linear_cross_entropy[" + std::to_string(n) + "," + std::to_string(d) + "," + std::to_string(v) + "] chunk " +
              std::to_string(chunk));
    }
}

TEST(FusedLinearCrossEntropy, GradientOfOneInputOnlyAndNoneWithoutGrad) {
  const Tensor targets = targets_tensor(draw_targets(23, 50, 5, -100), DType::i64);
  const Fn fused = [&](const std::vector<Tensor>& in) { return linear_cross_entropy(in[0], in[1], targets, -100, 7); };
  const Fn naive = [&](const std::vector<Tensor>& in) {
    return cross_entropy(matmul(in[0], in[1], false, true), targets);
  };
  const std::vector<Tensor> inputs = {randn({23, 6}, 5, DType::f64), randn({50, 6}, 6, DType::f64)};
  expect_matches_naive(fused, naive, inputs, {true, false}, "linear_cross_entropy, hidden only");
  expect_matches_naive(fused, naive, inputs, {false, true}, "linear_cross_entropy, weight only");
  // Not recorded: the same loss, and nothing on the tape.
  Tensor h = inputs[0].detach(), w = inputs[1].detach();
  h.set_requires_grad(true);
  double recorded = 0.0, unrecorded = 0.0;
  {
    NoGradGuard no_grad;
    unrecorded = fused({h, w}).item();
  }
  recorded = fused({h, w}).item();
  EXPECT_EQ(recorded, unrecorded);
  EXPECT_EQ(tape_size(), 1u);
  clear_tape();
}

TEST(FusedLinearCrossEntropy, Gradcheck) {
  const Tensor targets = targets_tensor(draw_targets(6, 13, 3, -100), DType::i32);
  // Two chunks of rows (5 and 1).
  expect_gradcheck([&](const std::vector<Tensor>& in) { return linear_cross_entropy(in[0], in[1], targets, -100, 5); },
                   {randn({6, 4}, 1, DType::f64), randn({13, 4}, 2, DType::f64)}, {true, true},
                   "linear_cross_entropy[6,4,13]");
}

TEST(FusedLinearCrossEntropy, IgnoredRowsAndBadTargets) {
  const Tensor h = randn({3, 4}, 1, DType::f32), w = randn({5, 4}, 2, DType::f32);
  EXPECT_EQ(linear_cross_entropy(h, w, targets_tensor({-100, -100, -100}, DType::i64)).item(), 0.0);
  try {
    linear_cross_entropy(h, w, targets_tensor({0, 5, 1}, DType::i64));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_cross_entropy: a target is not a class of the 5-row weight"),
              std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------------------------------
// swiglu / geglu / geglu_tanh

TEST(FusedGlu, Gradcheck) {
  for (const bool gelu_gate : {false, true}) {
    const Fn fn = [gelu_gate](const std::vector<Tensor>& in) {
      return gelu_gate ? geglu(in[0], in[1]) : swiglu(in[0], in[1]);
    };
    const std::string name = gelu_gate ? "geglu" : "swiglu";
    expect_gradcheck(fn, {randn({3, 17}, 1, DType::f64), randn({3, 17}, 2, DType::f64)}, {true, true}, name + "[3,17]");
    expect_gradcheck(fn, {core::transpose(randn({5, 4}, 3, DType::f64), 0, 1), randn({4, 5}, 4, DType::f64)},
                     {true, true}, name + "[4,5]T");
  }
}

TEST(FusedGlu, MatchesNaive) {
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor gate = mul_scalar(randn({2, 9, 333}, 1, dt), 3.0), up = randn({2, 9, 333}, 2, dt);
    const Fn sw = [](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); };
    const Fn sw_naive = [](const std::vector<Tensor>& in) { return mul(silu(in[0]), in[1]); };
    const Fn ge = [](const std::vector<Tensor>& in) { return geglu(in[0], in[1]); };
    const Fn ge_naive = [](const std::vector<Tensor>& in) { return mul(gelu(in[0]), in[1]); };
    expect_matches_naive(sw, sw_naive, {gate, up}, {}, "swiglu");
    expect_matches_naive(ge, ge_naive, {gate, up}, {}, "geglu");
    expect_matches_naive(sw, sw_naive, {gate, up}, {false, true}, "swiglu up only");
    expect_matches_naive(ge, ge_naive, {gate, up}, {true, false}, "geglu gate only");
  }
  EXPECT_THROW(swiglu(randn({3, 4}, 1, DType::f32), randn({4}, 2, DType::f32)), Error);
}

// glu_backward's recomputed output is the forward's (tests/fused_op_checks.h).
TEST(FusedGlu, BackwardRecomputesTheForwardOutputBitForBit) {
  for (DType dt : {DType::f32, DType::f64}) expect_glu_backward_output_is_the_forward(dt, Device::cpu());
}

// gelu_tanh(gate) * up written with small ops: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) up.
Tensor naive_geglu_tanh(const Tensor& g, const Tensor& up) {
  const Tensor u = mul_scalar(add(g, mul_scalar(mul(mul(g, g), g), 0.044715)), std::sqrt(2.0 / std::numbers::pi));
  return mul(mul(mul_scalar(g, 0.5), add_scalar(tanh(u), 1.0)), up);
}

TEST(FusedGegluTanh, Gradcheck) {
  const Fn fn = [](const std::vector<Tensor>& in) { return geglu_tanh(in[0], in[1]); };
  expect_gradcheck(fn, {randn({3, 17}, 1, DType::f64), randn({3, 17}, 2, DType::f64)}, {true, true}, "geglu_tanh[3,17]");
  expect_gradcheck(fn, {core::transpose(randn({5, 4}, 3, DType::f64), 0, 1), randn({4, 5}, 4, DType::f64)},
                   {true, true}, "geglu_tanh[4,5]T");
  expect_gradcheck(fn, {mul_scalar(randn({2, 9}, 5, DType::f64), 4.0), randn({2, 9}, 6, DType::f64)}, {true, true},
                   "geglu_tanh[2,9] wide gate");
}

// Against the formula of small ops (float64 and float32, the gate over about [-12, 12]) and,
// in float64 over [-5, 5], the closed-form derivative.
TEST(FusedGegluTanh, MatchesNaive) {
  const Fn fused = [](const std::vector<Tensor>& in) { return geglu_tanh(in[0], in[1]); };
  const Fn naive = [](const std::vector<Tensor>& in) { return naive_geglu_tanh(in[0], in[1]); };
  const Fn unary = [](const std::vector<Tensor>& in) { return mul(gelu_tanh(in[0]), in[1]); };
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor gate = mul_scalar(randn({2, 9, 333}, 1, dt), 3.0), up = randn({2, 9, 333}, 2, dt);
    expect_matches_naive(fused, naive, {gate, up}, {}, "geglu_tanh");
    expect_matches_naive(fused, unary, {gate, up}, {}, "geglu_tanh vs gelu_tanh * up");
    expect_matches_naive(fused, naive, {gate, up}, {true, false}, "geglu_tanh gate only");
    expect_matches_naive(fused, naive, {gate, up}, {false, true}, "geglu_tanh up only");
  }
  // Elementwise on a grid, with up = 1 and dout = 1: act and act' against the formulas in
  // long double (whose tanh keeps 1 + tanh(u) accurate to ~1e-12 relative down to x = -5).
  // act' is compared absolutely where |act'| < 1 (it crosses 0 near x = -0.75).
  std::vector<double> xs;
  for (int i = -5000; i <= 5000; ++i) xs.push_back(i * 1e-3);
  const long double c = std::sqrt(2.0L / std::numbers::pi_v<long double>), a = 0.044715L;
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor g = Tensor::from_vector(xs, {static_cast<std::int64_t>(xs.size())}).to(dt).set_requires_grad(true);
    const Tensor up = Tensor::ones(g.shape(), dt);
    const Tensor out = geglu_tanh(g, up);
    backward(out, Tensor::ones(out.shape(), dt));
    const std::vector<double> got = values(out), slope = values(g.grad()), x = values(g.detach());
    double worst_act = 0, worst_slope = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const long double xi = x[i], t = std::tanh(c * (xi + a * xi * xi * xi));
      const double act = static_cast<double>(0.5L * xi * (1 + t));
      const double d = static_cast<double>(0.5L * (1 + t) + 0.5L * xi * (1 - t * t) * c * (1 + 3 * a * xi * xi));
      worst_act = std::max(worst_act, std::fabs(got[i] - act) / std::max(std::fabs(act), 1e-30));
      worst_slope = std::max(worst_slope, std::fabs(slope[i] - d) / std::max(std::fabs(d), 1.0));
    }
    std::cout << "[ accuracy ] geglu_tanh " << dtype_name(dt) << " on [-5, 5]: act max relative error " << worst_act
              << ", act' max error " << worst_slope << "\n";
    const double tol = dt == DType::f64 ? 1e-11 : 5e-6;
    EXPECT_LT(worst_act, tol) << dtype_name(dt) << ": worst relative error of act";
    EXPECT_LT(worst_slope, tol) << dtype_name(dt) << ": worst relative error of act'";
  }
  // Far tails: no NaN or inf, act -> 0 (x -> -inf) and x (x -> +inf), act' -> 0 and 1.
  Tensor tails = Tensor::from_vector(std::vector<double>{-200, -40, -12, 12, 40, 200}, {6}).to(DType::f32);
  tails.set_requires_grad(true);
  const Tensor out = geglu_tanh(tails, Tensor::ones({6}, DType::f32));
  backward(out, Tensor::ones({6}, DType::f32));
  const std::vector<double> o = values(out), d = values(tails.grad());
  const std::vector<double> want_o = {0, 0, 0, 12, 40, 200}, want_d = {0, 0, 0, 1, 1, 1};
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(o[i], want_o[i], 1e-6 * std::fabs(want_o[i]) + 1e-30) << i;
    EXPECT_NEAR(d[i], want_d[i], 1e-6) << i;
  }
}

}  // namespace
}  // namespace dark
