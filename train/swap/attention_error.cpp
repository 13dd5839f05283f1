// Per-row attention errors (see attention_error.h).
#include "train/swap/attention_error.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dark::train {

std::vector<double> row_relative_errors(const Tensor& out, const Tensor& ref) {
  DARK_CHECK(out.shape() == ref.shape() && out.dim() == 4, "row_relative_errors: expected two (B, T, H, D) tensors, got ",
             out.describe(), " and ", ref.describe());
  const std::int64_t D = out.size(3);
  const std::vector<double> o = out.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> r = ref.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  std::vector<double> errors(o.size() / static_cast<std::size_t>(D));
  for (std::size_t row = 0; row < errors.size(); ++row) {
    double num = 0, den = 0;
    for (std::int64_t d = 0; d < D; ++d) {
      const double diff = o[row * D + d] - r[row * D + d];
      num += diff * diff;
      den += r[row * D + d] * r[row * D + d];
    }
    errors[row] = den > 0 ? std::sqrt(num / den) : 0.0;
  }
  return errors;
}

ErrorSummary summarise(std::vector<double>& errors) {
  ErrorSummary s;
  s.count = static_cast<std::int64_t>(errors.size());
  if (errors.empty()) return s;
  double total = 0;
  for (double e : errors) total += e;
  s.mean = total / static_cast<double>(errors.size());
  const auto mid = errors.begin() + static_cast<std::ptrdiff_t>(errors.size() / 2);
  std::nth_element(errors.begin(), mid, errors.end());
  s.median = *mid;
  return s;
}

nlohmann::json summary_json(const ErrorSummary& s) { return {{"mean", s.mean}, {"median", s.median}, {"count", s.count}}; }

ErrorSummary summary_from_json(const nlohmann::json& j) {
  return {j.at("mean").get<double>(), j.at("median").get<double>(), j.at("count").get<std::int64_t>()};
}

}  // namespace dark::train
