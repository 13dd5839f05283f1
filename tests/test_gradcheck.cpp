// Every differentiable op in the registry (tests/op_cases.h): tape gradients against
// central finite differences in float64, with broadcasting and non-contiguous inputs.
#include <gtest/gtest.h>

#include "autograd/gradcheck.h"
#include "autograd/tape.h"
#include "tests/op_cases.h"

namespace dark::testing {
namespace {

class Gradcheck : public ::testing::TestWithParam<OpCase> {};

TEST_P(Gradcheck, MatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  std::vector<Tensor> inputs = make_inputs(c, DType::f64, Device::cpu());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (c.inputs[i].differentiable) inputs[i].set_requires_grad(true);
  const GradcheckResult r = gradcheck(c.fn, inputs);
  EXPECT_TRUE(r.ok) << c.name << ": max abs error " << r.max_abs_error << ", max rel error " << r.max_rel_error
                    << "\n" << r.report;
  EXPECT_EQ(tape_size(), 0u) << "backward must consume the tape";
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string s;
  for (char ch : info.param.name) s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return s + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(AllOps, Gradcheck, ::testing::ValuesIn(op_cases()), case_name);

// gradcheck itself must fail on a wrong gradient, or it proves nothing.
TEST(GradcheckSelfTest, DetectsAWrongBackward) {
  Tensor x = Tensor::randn({4, 3}, 1, 0, DType::f64).set_requires_grad(true);
  auto wrong = [](const std::vector<Tensor>& in) {
    Tensor out = mul_scalar(in[0], 2.0).detach();  // forward 2x ...
    if (should_record({&in[0]}))
      record("wrong", {in[0]}, {&out}, [](BackwardContext& g) { g.set_input_grad(0, mul_scalar(g.out_grad(), 3.0)); });
    return out;  // ... but backward claims 3x
  };
  EXPECT_FALSE(gradcheck(wrong, {x}).ok);
}

}  // namespace
}  // namespace dark::testing
