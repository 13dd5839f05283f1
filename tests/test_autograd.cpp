// Tape semantics: recording rules, accumulation, zero_grad, detach, no_grad, explicit
// output gradients, freeing, and the error messages users see.
#include <gtest/gtest.h>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"

namespace dark {
namespace {

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no exception";
}

TEST(Autograd, RecordsOnlyWhenNeeded) {
  const Tensor a = Tensor::ones({3});
  const Tensor b = Tensor::ones({3});
  Tensor c = add(a, b);
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_FALSE(c.requires_grad());
  Tensor w = Tensor::ones({3}).set_requires_grad();
  {
    NoGradGuard no_grad;
    Tensor d = mul(w, a);
    EXPECT_FALSE(d.requires_grad());
    EXPECT_EQ(tape_size(), 0u);
  }
  Tensor d = mul(w, a);
  EXPECT_TRUE(d.requires_grad());
  EXPECT_FALSE(d.is_leaf());
  EXPECT_EQ(tape_size(), 1u);
  clear_tape();
}

TEST(Autograd, AccumulatesAcrossBackwardCallsUntilZeroGrad) {
  Tensor w = Tensor::from_vector<double>({1, 2, 3}, {3}).set_requires_grad();
  for (int i = 0; i < 3; ++i) backward(sum(square(w)));  // d/dw = 2w each time
  EXPECT_EQ(values(w.grad()), (std::vector<double>{6, 12, 18}));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  backward(sum(mul(w, w)));  // same tensor used twice in one op
  EXPECT_EQ(values(w.grad()), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(tape_size(), 0u);
}

TEST(Autograd, ExplicitOutputGradientAndSharedSubgraphs) {
  Tensor x = Tensor::from_vector<double>({1, -2}, {2}).set_requires_grad();
  Tensor y = mul_scalar(x, 3.0);
  Tensor z = add(y, square(y));  // y feeds two ops
  backward(z, Tensor::from_vector<double>({1, 10}, {2}));
  // dz/dx = 3 (1 + 2y) = 3 + 18 x
  EXPECT_EQ(values(x.grad()), (std::vector<double>{21, 10 * (3 - 36)}));
}

// A tensor read by three ops gets its three contributions summed in one pass (tape.cpp holds
// the second back): the bits of adding them in f32 in the replay's order, and the same with a
// fourth reader, where the sum goes two terms at a time.
TEST(Autograd, ThreeAndFourContributionsSumInReplayOrder) {
  const Tensor x0 = mul_scalar(Tensor::randn({7, 33}, 8), 0.7);
  const auto term = [&x0](Tensor (*branch)(const Tensor&)) {
    Tensor leaf = x0.detach().set_requires_grad(true);
    backward(sum(branch(leaf)));
    return leaf.grad();
  };
  Tensor (*const branches[])(const Tensor&) = {[](const Tensor& t) { return tanh(t); },
                                               [](const Tensor& t) { return sigmoid(t); },
                                               [](const Tensor& t) { return exp(t); },
                                               [](const Tensor& t) { return square(t); }};
  for (const int readers : {3, 4}) {
    Tensor x = x0.detach().set_requires_grad(true);
    const Tensor h = mul_scalar(x, 1.0);  // a non-leaf, which tape.cpp's sums are for
    Tensor y = branches[0](h);
    for (int r = 1; r < readers; ++r) y = add(y, branches[r](h));
    backward(sum(y));
    // The replay meets the readers last to first.
    Tensor want = term(branches[readers - 1]);
    for (int r = readers - 2; r >= 0; --r) want = add(want, term(branches[r]));
    EXPECT_EQ(x.grad().to_vector<float>(), want.to_vector<float>()) << readers << " readers";
  }
}

TEST(Autograd, DetachStopsGradients) {
  Tensor x = Tensor::from_vector<double>({2}, {1}).set_requires_grad();
  Tensor y = mul(x, mul(x, x).detach());  // d/dx = x^2 (the detached factor is a constant)
  backward(sum(y));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{4}));
}

TEST(Autograd, GradientsOfBf16AccumulateInFloat32) {
  Tensor w = Tensor::from_vector<double>({1.5, 2.5}, {2}).to(DType::f32).set_requires_grad();
  Tensor w16 = to_dtype(w, DType::f64);
  backward(sum(square(w16)));
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(values(w.grad()), (std::vector<double>{3, 5}));
}

TEST(Autograd, BackwardFreesTheTapeAndRefusesAConsumedGraph) {
  Tensor w = Tensor::ones({2}).set_requires_grad();
  Tensor loss = sum(exp(w));
  EXPECT_EQ(tape_size(), 2u);
  backward(loss);
  EXPECT_EQ(tape_size(), 0u);
  const std::string m = message_of([&] { backward(loss); });
  EXPECT_NE(m.find("no longer on the tape"), std::string::npos) << m;
}

TEST(Autograd, ErrorsNameShapesDtypesAndDevices) {
  const Tensor a = Tensor::zeros({2, 3});
  const Tensor b = Tensor::zeros({4, 5});
  std::string m = message_of([&] { add(a, b); });
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  m = message_of([&] { matmul(a, b); });
  EXPECT_NE(m.find("f32[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("f32[4, 5]"), std::string::npos) << m;
  m = message_of([&] { mul(a, Tensor::zeros({2, 3}, DType::f64)); });
  EXPECT_NE(m.find("dtype mismatch"), std::string::npos) << m;
  EXPECT_NE(m.find("f64[2, 3]"), std::string::npos) << m;
  // Device mismatches are checked in test_gpu_ops.cpp, where a device exists.

  Tensor w = Tensor::ones({2, 3}).set_requires_grad();
  Tensor y = mul_scalar(w, 2.0);
  m = message_of([&] { backward(y); });
  EXPECT_NE(m.find("not a scalar"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  m = message_of([&] { backward(y, Tensor::ones({3, 2})); });
  EXPECT_NE(m.find("[3, 2]"), std::string::npos) << m;
  clear_tape();
  m = message_of([&] { backward(sum(a)); });
  EXPECT_NE(m.find("does not require grad"), std::string::npos) << m;
  m = message_of([&] { Tensor::zeros({2}, DType::i64).set_requires_grad(); });
  EXPECT_NE(m.find("floating"), std::string::npos) << m;
  m = message_of([&] { kernels::softmax_forward().get(DeviceType::cuda, DType::i32); });
  EXPECT_EQ(m, "softmax_forward: no kernel for cuda/i32");
}

TEST(Autograd, DeterministicBitsAcrossRuns) {
  auto run = [] {
    Tensor w = Tensor::randn({64, 33}, 5).set_requires_grad();
    Tensor x = Tensor::randn({50, 64}, 6);
    backward(sum(logsumexp(matmul(x, w), {1})));
    return values(w.grad());
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace dark
