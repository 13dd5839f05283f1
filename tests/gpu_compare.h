// Running an op case (tests/op_cases.h) on a device and comparing it with the CPU in float64:
// shared by the GPU test programs (test_gpu_ops, test_gpu_kernels), which run on a GPU when
// there is one and always on the CUDA emulator (their *_emulated twins).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "tests/op_cases.h"

namespace dark {
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }  // gtest parameters
}  // namespace dark

namespace dark::testing {

struct Tolerance {
  double rtol, atol;
  double l2 = 0;      // when > 0, also |got - want|_2 <= l2 |want|_2
  double of_max = 0;  // each element may also be off by this fraction of max |want|: for long
                      // sums that cancel, whose small elements carry the large ones' rounding
};

// "" when got (any device) matches want (CPU f64) within tol; otherwise what differs.
inline std::string compare(const Tensor& got, const Tensor& want, Tolerance tol) {
  const auto g = got.to(Device::cpu()).to(DType::f64).to_vector<double>();
  const auto w = want.to(DType::f64).to_vector<double>();
  if (g.size() != w.size()) return "size mismatch";
  double max_abs = 0, err2 = 0, ref2 = 0, max_want = 0;
  for (double x : w) max_want = std::max(max_want, std::fabs(x));
  std::string first;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - w[i]);
    max_abs = std::max(max_abs, err);
    err2 += err * err, ref2 += w[i] * w[i];
    if (!(err <= tol.atol + tol.rtol * std::fabs(w[i]) + tol.of_max * max_want) && first.empty())
      first = str("element ", i, ": gpu ", g[i], " cpu-f64 ", w[i]);
  }
  if (tol.l2 > 0 && !(std::sqrt(err2) <= tol.l2 * std::sqrt(ref2)) && first.empty())
    first = str("relative L2 error ", std::sqrt(err2 / std::max(ref2, 1e-300)), " > ", tol.l2);
  return first.empty() ? ""
                       : first + str(" (max abs err ", max_abs, ", max |cpu| ", max_want, ", relative L2 error ",
                                     std::sqrt(err2 / std::max(ref2, 1e-300)), ")");
}

// Forward output and input gradients of one case on (device, dtype). With `reference`,
// the inputs are drawn in dtype (so bf16 rounding of the inputs is shared) and then
// computed in float64 on the CPU.
inline std::vector<Tensor> run_case(const OpCase& c, DType dtype, Device device, bool reference = false) {
  std::vector<Tensor> inputs = make_inputs(c, dtype, device);
  if (reference)
    for (Tensor& x : inputs) x = x.to(DType::f64), dtype = DType::f64;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (c.inputs[i].differentiable) inputs[i].set_requires_grad(true);
  Tensor out = c.fn(inputs);
  const Tensor dout = Tensor::randn(out.shape(), 99, 0, DType::f64).to(dtype).to(device);
  backward(out, dout);
  std::vector<Tensor> results = {out.detach()};
  for (const Tensor& x : inputs) results.push_back(x.grad());
  return results;
}

// Runs the case on cuda:0 in dtype and on the CPU in float64, expecting every result to match.
inline void expect_case_matches_cpu(const OpCase& c, DType dtype, Tolerance tol) {
  const std::vector<Tensor> want = run_case(c, dtype, Device::cpu(), true);
  const std::vector<Tensor> got = run_case(c, dtype, Device::cuda(0));
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!want[i].defined()) continue;
    ASSERT_TRUE(got[i].defined()) << c.name << " result " << i << " missing on the GPU";
    EXPECT_EQ(got[i].device(), Device::cuda(0));
    const std::string err = compare(got[i], want[i], tol);
    EXPECT_TRUE(err.empty()) << c.name << " " << dtype_name(dtype) << (i == 0 ? " output: " : " grad of input ")
                             << (i == 0 ? "" : std::to_string(i - 1)) << " " << err;
  }
}

inline std::string case_name(const OpCase& c, DType dtype, std::size_t index) {
  std::string s;
  for (char ch : c.name) s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return s + "_" + dtype_name(dtype) + "_" + std::to_string(index);
}

}  // namespace dark::testing
