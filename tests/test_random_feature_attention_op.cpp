// random_feature_attention (feature logits computed inside the kernel) against its
// definition: linear_attention on logits built from small ops (per-head matmul with omega,
// minus |x|^2 / 2 and ln(m) / 2, plus the log weight), forward and the gradients of x_q, x_k,
// v and omega, in float64 (1e-10) and float32; a float64 gradcheck; grouped-query heads, key
// masks, causal and not; and the memory claim: the op keeps O(T (r + Dv)) for the backward
// where the composition keeps the (B, T, H, m) logits.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "tests/test_util.h"

namespace dark {
namespace {

using testing::expect_close;
using testing::mask_tensor;
using testing::Padding;
using testing::padding_mask;

// The logits of x (B, T, H, r) with omega (Hkv, m, r) from small ops.
Tensor reference_logits(const Tensor& x, const Tensor& omega, const Tensor& log_weight) {
  const std::int64_t B = x.size(0), T = x.size(1), H = x.size(2), r = x.size(3);
  const std::int64_t hkv = omega.size(0), m = omega.size(1), group = H / hkv;
  std::vector<std::int64_t> kv_of;
  for (std::int64_t h = 0; h < H; ++h) kv_of.push_back(h / group);
  const Tensor index = Tensor::from_vector(kv_of, {H});
  const Tensor per_head = index_select(omega, 0, index);  // (H, m, r)
  const Tensor heads_first = permute(reshape(x, {B * T, H, r}), {1, 0, 2});             // (H, B T, r)
  Tensor logits = permute(matmul(heads_first, per_head, false, true), {1, 0, 2});  // (B T, H, m)
  logits = reshape(logits, {B, T, H, m});
  const Tensor shift = add_scalar(mul_scalar(sum(square(x), {3}, true), 0.5), 0.5 * std::log(static_cast<double>(m)));
  logits = sub(logits, shift);
  if (log_weight.defined()) logits = add(logits, reshape(index_select(log_weight, 0, index), {1, 1, H, m}));
  return logits;
}

struct Case {
  std::int64_t b, t, hq, hkv, r, m, dv, chunk;
  bool causal, weighted;
  Padding padding;
  bool masked;
  std::string name() const {
    return "B" + std::to_string(b) + " T" + std::to_string(t) + " H" + std::to_string(hq) + "/" + std::to_string(hkv) +
           " r" + std::to_string(r) + " m" + std::to_string(m) + (causal ? " causal" : " bidirectional") +
           (weighted ? " weighted" : "") + (masked ? " masked" : "");
  }
  std::vector<Tensor> inputs(DType dtype) const {
    return {Tensor::randn({b, t, hq, r}, 3, 0, DType::f64).to(dtype), Tensor::randn({b, t, hkv, r}, 3, 1, DType::f64).to(dtype),
            Tensor::randn({b, t, hkv, dv}, 3, 2, DType::f64).to(dtype),
            mul_scalar(Tensor::randn({hkv, m, r}, 3, 3, DType::f64), 0.7).to(dtype)};
  }
  Tensor log_weight(DType dtype) const {
    return weighted ? mul_scalar(Tensor::randn({hkv, m}, 3, 4, DType::f64), 0.3).to(dtype) : Tensor();
  }
  Tensor mask() const { return masked ? mask_tensor(padding_mask(padding, b, t), b) : Tensor(); }
};

const Case kCases[] = {
    {2, 37, 4, 2, 6, 8, 5, 8, true, false, Padding::right, false},
    {1, 50, 2, 1, 5, 12, 3, 16, true, true, Padding::holes, true},
    {2, 29, 2, 2, 4, 6, 4, 8, false, true, Padding::left, true},
    {2, 41, 3, 3, 8, 16, 6, 64, true, false, Padding::left, true},
};

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// eps: the offsets carry no gradient and cancel except through eps, so a gradcheck uses a
// tiny one (as linear_attention's does).
Fn fused(const Case& c, DType dtype, double eps = 1e-6) {
  return [c, dtype, eps](const std::vector<Tensor>& x) {
    return random_feature_attention(x[0], x[1], x[2], x[3], c.log_weight(dtype), c.causal, eps, c.chunk, c.mask());
  };
}
Fn composed(const Case& c, DType dtype) {
  return [c, dtype](const std::vector<Tensor>& x) {
    const Tensor lw = c.log_weight(dtype);
    return linear_attention(reference_logits(x[0], x[3], lw), reference_logits(x[1], x[3], lw), x[2], c.causal, 1e-6,
                            c.chunk, c.mask());
  };
}

struct GradRun {
  Tensor out;
  std::vector<Tensor> grads;
};
GradRun run(const Fn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : inputs) leaves.push_back(x.detach().set_requires_grad(true));
  Tensor out = fn(leaves);
  backward(out, Tensor::randn(out.shape(), 9, 0, DType::f64).to(out.dtype()));
  GradRun r{out.detach(), {}};
  for (const Tensor& l : leaves) r.grads.push_back(l.grad());
  return r;
}

TEST(RandomFeatureAttentionOp, EqualsLinearAttentionOnComposedLogits) {
  for (const Case& c : kCases)
    for (DType dtype : {DType::f64, DType::f32}) {
      const double tol = dtype == DType::f64 ? 1e-10 : 2e-5;
      const std::vector<Tensor> in = c.inputs(dtype);
      const GradRun a = run(fused(c, dtype), in), b = run(composed(c, dtype), in);
      const std::string tag = c.name() + " " + dtype_name(dtype);
      expect_close(a.out, b.out, tol, tol, tag + " output");
      const char* names[] = {"d x_q", "d x_k", "d v", "d omega"};
      for (int i = 0; i < 4; ++i) expect_close(a.grads[i], b.grads[i], tol, tol, tag + " " + names[i]);
    }
}

TEST(RandomFeatureAttentionOp, Gradcheck) {
  const Case c{1, 11, 2, 1, 3, 4, 2, 4, true, true, Padding::holes, true};
  std::vector<Tensor> in = c.inputs(DType::f64);
  for (Tensor& x : in) x.set_requires_grad(true);
  const GradcheckResult r = gradcheck(fused(c, DType::f64, 1e-10), in);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(RandomFeatureAttentionOp, OmegaWithoutGradientIsNotComputed) {
  const Case c = kCases[0];
  std::vector<Tensor> in = c.inputs(DType::f32);
  for (int i = 0; i < 3; ++i) in[i].set_requires_grad(true);
  backward(sum(random_feature_attention(in[0], in[1], in[2], in[3], Tensor(), true, 1e-6, 8)));
  EXPECT_FALSE(in[3].grad().defined());
  EXPECT_TRUE(in[0].grad().defined());
}

// What a layer keeps for its backward: the op's saved tensors are its inputs, out and den;
// the composition also keeps both (B, T, H, m) logit tensors.
TEST(RandomFeatureAttentionOp, KeepsNoFeatureTensorsForTheBackward) {
  const std::int64_t B = 1, T = 2048, H = 2, r = 16, m = 256, dv = 16;
  CachingAllocator& alloc = allocator_for(Device::cpu());
  auto kept = [&](bool fused_op) {
    std::vector<Tensor> x = {Tensor::randn({B, T, H, r}, 1, 0).set_requires_grad(true),
                             Tensor::randn({B, T, H, r}, 1, 1).set_requires_grad(true),
                             Tensor::randn({B, T, H, dv}, 1, 2).set_requires_grad(true), Tensor::randn({H, m, r}, 1, 3)};
    alloc.empty_cache();
    const std::size_t before = alloc.stats().bytes_in_use;
    Tensor out = fused_op ? random_feature_attention(x[0], x[1], x[2], x[3], Tensor(), true, 1e-6, 64)
                          : linear_attention(reference_logits(x[0], x[3], Tensor()), reference_logits(x[1], x[3], Tensor()),
                                             x[2], true, 1e-6, 64);
    const std::size_t held = alloc.stats().bytes_in_use - before;
    clear_tape();
    return held;
  };
  const std::size_t fused_bytes = kept(true), composed_bytes = kept(false);
  const std::size_t logits_bytes = 2 * B * T * H * m * sizeof(float);
  EXPECT_LT(fused_bytes, std::size_t{B * T * H * (2 * dv + 1) * sizeof(float)} + 4096) << "out and den only";
  EXPECT_GE(composed_bytes, logits_bytes);
}

// The whole pass: the forward and the backward never allocate a (B, T, H, m) tensor (the
// logits are made chunk by chunk in the kernel's scratch); the peak over the pass is the
// inputs' gradients, out, den and the output gradient (about 2 MB here), under one logit
// tensor (4 MiB; the kernel that made the logits per call held four in its backward).
TEST(RandomFeatureAttentionOp, PassPeakHoldsNoLogitTensor) {
  const std::int64_t B = 1, T = 2048, H = 2, r = 16, m = 256, dv = 16;
  CachingAllocator& alloc = allocator_for(Device::cpu());
  for (bool causal : {true, false}) {
    std::vector<Tensor> x = {Tensor::randn({B, T, H, r}, 1, 0).set_requires_grad(true),
                             Tensor::randn({B, T, H, r}, 1, 1).set_requires_grad(true),
                             Tensor::randn({B, T, H, dv}, 1, 2).set_requires_grad(true),
                             mul_scalar(Tensor::randn({H, m, r}, 1, 3), 0.3).set_requires_grad(true)};
    alloc.empty_cache();
    alloc.reset_peak();
    const std::size_t before = alloc.stats().bytes_in_use;
    backward(sum(random_feature_attention(x[0], x[1], x[2], x[3], Tensor(), causal, 1e-6, 64)));
    const std::size_t peak = alloc.stats().peak_bytes_in_use - before;
    const std::size_t logit_tensor = B * T * H * m * sizeof(float);
    EXPECT_LT(peak, logit_tensor) << (causal ? "causal" : "bidirectional");
    EXPECT_TRUE(x[3].grad().defined());
  }
}

}  // namespace
}  // namespace dark
