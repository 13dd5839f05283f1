// Numbers of run statistics and their JSON form: NaN marks a statistic without a value (too
// few points, no data), and JSON, which has no NaN, writes every non-finite value as null.
#pragma once
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace dark::metrics {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace dark::metrics
