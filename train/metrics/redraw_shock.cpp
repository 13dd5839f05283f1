// Redraw shocks from a run's metrics (see redraw_shock.h).
#include "train/metrics/redraw_shock.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "train/metrics/json_number.h"

namespace dark::metrics {
namespace {

// Mean and maximum of the finite values; NaN for none.
std::pair<double, double> mean_and_worst(const std::vector<double>& values) {
  double sum = 0, worst = -std::numeric_limits<double>::infinity();
  int n = 0;
  for (const double v : values)
    if (std::isfinite(v)) sum += v, worst = std::max(worst, v), ++n;
  return n ? std::pair{sum / n, worst} : std::pair{kNaN, kNaN};
}

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

RedrawShockReport analyze_redraw_shocks(const std::vector<StepRecord>& steps, const std::vector<RedrawRecord>& redraws,
                                        int window, std::int64_t nominal_interval) {
  RedrawShockReport r;
  std::map<std::int64_t, double> loss;  // the finite losses of applied steps, by step
  for (const StepRecord& s : steps)
    if (!s.skipped && std::isfinite(s.loss)) loss[s.step] = s.loss;
  std::vector<RedrawShock> shocks;
  for (const RedrawRecord& d : redraws) shocks.push_back({d.step, kNaN, d.held_out_after - d.held_out_before});
  if (shocks.empty() && nominal_interval > 0 && !loss.empty()) {
    // Step s trains with epoch (s - 1) / interval: a new epoch starts at s = k interval + 1.
    r.nominal = true;
    for (std::int64_t s = nominal_interval + 1; s <= loss.rbegin()->first; s += nominal_interval) shocks.push_back({s, kNaN, kNaN});
  }
  // Mean loss over [from, from + window): NaN unless every step there has one.
  const auto mean_over = [&](std::int64_t from) {
    double sum = 0;
    for (std::int64_t s = from; s < from + window; ++s) {
      const auto it = loss.find(s);
      if (it == loss.end()) return kNaN;
      sum += it->second;
    }
    return sum / window;
  };
  for (RedrawShock& s : shocks)
    if (window >= 1) s.loss_jump = mean_over(s.step) - mean_over(s.step - window);
  std::vector<double> loss_jumps, held_out_jumps;
  for (const RedrawShock& s : shocks) loss_jumps.push_back(s.loss_jump), held_out_jumps.push_back(s.held_out_jump);
  std::tie(r.mean_loss_jump, r.worst_loss_jump) = mean_and_worst(loss_jumps);
  std::tie(r.mean_held_out_jump, r.worst_held_out_jump) = mean_and_worst(held_out_jumps);
  r.shocks = std::move(shocks);
  return r;
}

nlohmann::json RedrawShockReport::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const RedrawShock& s : shocks)
    list.push_back({{"step", s.step}, {"loss_jump", number(s.loss_jump)}, {"held_out_jump", number(s.held_out_jump)}});
  return {{"redraws", nominal ? 0 : shocks.size()},
          {"nominal", nominal},
          {"mean_loss_jump", number(mean_loss_jump)},
          {"worst_loss_jump", number(worst_loss_jump)},
          {"mean_held_out_jump", number(mean_held_out_jump)},
          {"worst_held_out_jump", number(worst_held_out_jump)},
          {"shocks", list}};
}

}  // namespace dark::metrics
