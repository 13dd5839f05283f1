// Checks that a fused op has the bits of what it replaced, shared by the CPU tests
// (test_fused_ops) and the GPU tests (test_gpu_kernels): the same assertions on any device.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/kernel_profile.h"
#include "test_util.h"

namespace dark::testing {

inline Tensor randn_on(const Shape& shape, std::uint64_t seed, DType dtype, Device device) {
  return Tensor::randn(shape, seed, 0, DType::f64).to(dtype).to(device);
}

// glu_backward's recomputed output is the forward's, bit for bit (the gated MLP's down
// projection takes its weight gradient from it), for every op and set of wanted gradients,
// and asking for it changes no gradient bit. Gates from -20 to 20: geglu's cdf is subnormal
// in f32 below about -13.
inline void expect_glu_backward_output_is_the_forward(DType dtype, Device device) {
  const Tensor sweep = add_scalar(mul_scalar(Tensor::arange(1001, DType::f64), 0.04), -20.0);
  const Tensor gate = concat({mul_scalar(Tensor::randn({1000}, 1, 0, DType::f64), 3.0), sweep}, 0).to(dtype).to(device);
  const Tensor up = randn_on({2001}, 2, dtype, device), dout = randn_on({2001}, 3, dtype, device);
  for (const GluOp op : {GluOp::swiglu, GluOp::geglu, GluOp::geglu_tanh}) {
    const Tensor forward = op == GluOp::swiglu ? swiglu(gate, up) : op == GluOp::geglu ? geglu(gate, up)
                                                                                       : geglu_tanh(gate, up);
    const std::string what = str(static_cast<int>(op), " ", dtype_name(dtype), " on ", device.to_string());
    const GluGrads without = glu_backward(op, gate, up, dout, true, true, false);
    for (const auto& [want_gate, want_up] : {std::pair{true, true}, {true, false}, {false, true}, {false, false}}) {
      const GluGrads with = glu_backward(op, gate, up, dout, want_gate, want_up, true);
      EXPECT_EQ(values(with.out), values(forward)) << what;
      if (want_gate) EXPECT_EQ(values(with.dgate), values(without.dgate)) << what;
      if (want_up) EXPECT_EQ(values(with.dup), values(without.dup)) << what;
    }
  }
}

// add_rms_norm has the bits of add then rms_norm: both outputs, and the gradients of x,
// residual and weight when both outputs get random gradients (so the backward's sum of the
// two is checked too), and when only the norm is used (a model's final norm), where the
// backward adds no zeros for the sum (no fill kernel).
inline void expect_add_rms_norm_is_add_then_rms_norm(DType dtype, Device device, const Shape& shape, double eps) {
  const Shape row = {shape.back()};
  const Tensor x0 = randn_on(shape, 1, dtype, device), r0 = randn_on(shape, 2, dtype, device);
  const Tensor w0 = randn_on(row, 3, dtype, device);
  const Tensor ds = randn_on(shape, 4, dtype, device), dn = randn_on(shape, 5, dtype, device);
  const auto run = [&](bool fused, bool sum_used) {
    Tensor x = x0.detach().set_requires_grad(true), r = r0.detach().set_requires_grad(true);
    Tensor w = w0.detach().set_requires_grad(true);
    SumAndNorm out;
    if (fused) {
      out = add_rms_norm(x, r, w, eps);
    } else {
      out.sum = add(x, r);
      out.normed = rms_norm(out.sum, w, eps);
    }
    std::vector<std::vector<double>> parts = {values(out.sum), values(out.normed)};
    const Tensor normed_loss = dark::sum(mul(out.normed, dn));
    const Tensor loss = sum_used ? add(dark::sum(mul(out.sum, ds)), normed_loss) : normed_loss;
    KernelProfile profile;
    backward(loss);
    std::int64_t fills = 0;
    for (const KernelProfile::Row& r : profile.finish()) fills += r.kernel == "fill" ? r.calls : 0;
    for (const Tensor* t : {&x, &r, &w}) parts.push_back(values(t->grad()));
    parts.push_back({static_cast<double>(fills)});  // as many as add then rms_norm: no zeros for an unused sum
    return parts;
  };
  for (const bool sum_used : {true, false}) {
    const auto fused = run(true, sum_used), plain = run(false, sum_used);
    for (std::size_t i = 0; i < fused.size(); ++i)
      EXPECT_EQ(fused[i], plain[i]) << dtype_name(dtype) << " on " << device.to_string() << ", part " << i
                                    << (sum_used ? "" : ", the sum unused");
  }
}

}  // namespace dark::testing
