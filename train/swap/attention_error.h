// How far an attention output is from its reference, per row: the measure the probe reports
// for every estimator and the attention transfer reports per swapped layer before and after
// (|out - ref| / |ref| for each (batch, position, head) row), and its summary.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace dark::train {

// |out - ref| / |ref| for every (batch, position, head) row of (B, T, H, D) tensors, in row
// order, computed in float64 on the host; a row whose reference is exactly zero (a padded
// row) counts 0.
std::vector<double> row_relative_errors(const Tensor& out, const Tensor& ref);

struct ErrorSummary {
  double mean = 0, median = 0;
  std::int64_t count = 0;
};
// Mean and median (the upper middle element for an even count) of `errors`, which it reorders.
ErrorSummary summarise(std::vector<double>& errors);
nlohmann::json summary_json(const ErrorSummary& s);
ErrorSummary summary_from_json(const nlohmann::json& j);

}  // namespace dark::train
