// gradcheck: compares the tape's gradients of fn with central finite differences in
// float64. The scalar checked is sum(fn(inputs) * dout) for a fixed random dout, which
// catches errors that sum(fn) would hide (symmetric or sign errors that cancel).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dark {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  std::uint64_t seed = 1234;  // for dout
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::string report;  // first mismatches, per input
};

// inputs must be f64 tensors (any strides); those with requires_grad are checked.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace dark
