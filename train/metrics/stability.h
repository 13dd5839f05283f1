// Training-stability metrics of a run: loss spikes, gradient-norm spikes, divergence, and the
// final and best validation numbers, computed from the lines of metrics.jsonl.
//
// Spike rules (config section `stability`, `rule`):
//   robust (default)  step t is a spike when its value exceeds a robust running baseline by
//               more than `sigmas` noise standard deviations AND by an absolute margin that batch
//               noise alone does not reach: the loss by `loss_margin` nats, the gradient norm by a
//               factor `grad_margin` (gradient norms are judged on a log scale, their noise being
//               multiplicative). The baseline: its level m is the median of the previous
//               n = max(1, window / 5) finite values; its noise sd is 1.4826 x the median
//               absolute deviation of the step-to-step differences over the previous `window`
//               values, / sqrt 2. Differences, because a trend cancels in them: over the steep
//               start of a run the plain MAD of the values is several times the batch noise
//               (a 2.9-nat spike with a 70x gradient norm hid under it in redraw_shock); a short
//               median, because a long one lags behind a falling curve and understates heights.
//               A spike is an event: it starts at the first step over the line, its height is
//               the highest excess before the value is back within the noise band (m + sigmas
//               x sd of the baseline frozen at its start), and its recovery time is the steps
//               that took (none when it did not happen within `window` steps: the event then
//               closes, and the baseline has moved on). Every step from the second is tested:
//               while fewer than n values precede it, the noise is the whole run's, so that a
//               finetuning run that blows up on its second step (no warm-up, too high a rate)
//               shows that spike. The defaults were chosen from data: the control runs of the
//               stability experiments report none at the rates they are stable at
//               (docs/results.md, section 4.1).
//   ratio       the rule of earlier reports: every step whose value exceeds factor x the median
//               of the previous `window` finite values (loss_factor 1.2, grad_factor 2.0) is a
//               spike. It fires on batch noise at small batch sizes. A step is tested once at
//               least max(1, window / 5) earlier values exist.
//   divergence  the first step that is skipped (non-finite loss or gradient), has a
//               non-finite loss, or, once warm-up (schedule.warmup_steps) is over, ends a
//               stretch of n = max(1, window / 5) steps whose median loss is above the
//               initial loss, the highest loss of the run's first n steps. Both sides are
//               taken over n steps because single batches are noisy: a finetuning run starts
//               at its pretrained loss, and one hard batch later must not read as divergence,
//               while a loss that climbs back above where training began and stays there does.
// The core, analyze_stability(), is a pure function of the step and eval records.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "train/metrics/redraw_shock.h"
#include "train/metrics/run_metrics.h"

namespace dark::metrics {

enum class SpikeRule { robust, ratio };

// The stability section of a run config (train/config.cpp binds its rows to these members).
struct StabilityConfig {
  SpikeRule rule = SpikeRule::robust;  // how a spike is told from noise (see above)
  int window = 50;                  // previous steps a value is compared with (robust: noise over them, level over window / 5)
  double loss_sigmas = 7.0;         // robust: loss excess > loss_sigmas noise sd ...
  double loss_margin = 0.25;        // ... and > loss_margin nats
  double grad_sigmas = 6.0;         // robust: log gradient-norm excess > grad_sigmas noise sd ...
  double grad_margin = 4.0;         // ... and the norm > grad_margin x its level
  double loss_factor = 1.2;         // ratio: loss > loss_factor x the median
  double grad_factor = 2.0;         // ratio: gradient norm > grad_factor x the median
  int redraw_eval_batches = 2;      // validation batches measured before and after each redraw; 0 = off
  int redraw_window = 10;           // K: training steps on each side of a redraw for its loss jump
  bool stop_on_divergence = false;  // end a diverged run early (no final checkpoint), e.g. in sweeps
};

// What the analysis needs: the section's rules, the run's warm-up and redraw interval.
struct StabilityOptions : StabilityConfig {
  std::int64_t warmup_steps = 0;  // divergence by "loss above the initial loss" counts after this step
  std::int64_t redraw_interval = 0;  // attention.redraw_interval: nominal redraw steps of a run without redraws
  int divergence_span() const { return window / 5 > 1 ? window / 5 : 1; }  // n in the rule above
};

struct Spike {
  std::int64_t step = 0;  // where it starts
  double value = 0;   // the loss or gradient norm at its peak
  double median = 0;  // the baseline: median of the window before it started
  double ratio = 0;   // value / median
  // Its height above the baseline: nats for the loss, log(value / median) for gradient norms
  // (the scale the rule judges on); and in noise units, height / robust sd (NaN under the
  // ratio rule, infinite for a window without spread).
  double height = 0, noise_units = 0;
  // Steps from its start until the value was back within the noise band; empty when that did
  // not happen within the window (and always under the ratio rule, which has no band).
  std::optional<std::int64_t> recovery_steps;
};

// What makes a value of one series a spike (see the rules above).
struct SpikeCriteria {
  SpikeRule rule = SpikeRule::robust;
  int window = 50;
  double sigmas = 7.0;     // robust: excess > sigmas x noise sd ...
  double margin = 0.25;    // robust: ... and > margin (in the judged scale: nats, or log ratio)
  double factor = 1.2;     // ratio: value > factor x median
  bool log_scale = false;  // judge log(value) (gradient norms)
};
SpikeCriteria loss_spike_criteria(const StabilityConfig& c);
SpikeCriteria grad_spike_criteria(const StabilityConfig& c);

// How far a series strays above its running baseline (the robust rule's level and noise) at
// any tested step, spike or not: the largest excess in noise units and the
// largest in the series' units (nats). On a control run it is the noise floor the detector's
// thresholds must clear (docs/results.md, section 4.1).
struct Excursion {
  double noise_units = 0, height = 0;
  std::int64_t noise_units_step = 0, height_step = 0;
};
// `log_scale`: judged on log values (gradient norms); the height is then log(value / level).
Excursion largest_excursion(const std::vector<std::int64_t>& steps, const std::vector<double>& values, int window,
                            bool log_scale = false);

struct StabilityReport {
  SpikeRule rule = SpikeRule::robust;  // the rule the spikes were found with
  std::int64_t steps = 0;  // step records seen
  std::vector<Spike> loss_spikes, grad_spikes;
  std::optional<Spike> largest_loss_spike;  // the highest of loss_spikes (by height)
  Excursion loss_excursion, grad_excursion;  // the largest excursions above the baseline (grad: log scale)
  bool diverged = false;
  std::int64_t divergence_step = 0;  // when diverged
  std::string divergence_reason;     // "non-finite loss", "skipped step", "median loss 6.1 of steps 81-90 above the initial loss 5.5 ..."
  std::optional<EvalRecord> final_eval, best_eval;  // best = lowest validation loss
  std::optional<EvalRecord> start_eval;  // the eval at step 0: a finetuning run's starting point
  bool stopped_on_divergence = false;  // set by the trainer when stability.stop_on_divergence ended the run
  RedrawShockReport redraw;            // the random-feature redraws' shocks (train/metrics/redraw_shock.h)

  nlohmann::json to_json() const;
};

// The spikes of a series under `criteria`: values[i] against the up-to-`window` finite values
// before it. NaN values are never spikes and never enter a baseline.
std::vector<Spike> find_spikes(const std::vector<std::int64_t>& steps, const std::vector<double>& values,
                               const SpikeCriteria& criteria);
// The ratio rule with its two numbers (the rule of earlier reports).
std::vector<Spike> find_spikes(const std::vector<std::int64_t>& steps, const std::vector<double>& values, int window,
                               double factor);

// Median and robust standard deviation (1.4826 x the median absolute deviation) of values.
struct RobustSpread {
  double median = 0, sd = 0;
};
RobustSpread robust_spread(const std::vector<double>& values);

StabilityReport analyze_stability(const RunMetrics& metrics, const StabilityOptions& options);

// The divergence rule above, one step at a time (shared by analyze_stability and the
// monitor, so a run stopped on divergence and its report agree).
class DivergenceCheck {
 public:
  explicit DivergenceCheck(const StabilityOptions& options) : options_(options) {}
  // Why this step diverges, or "" when it does not.
  std::string observe(const StepRecord& r);

 private:
  StabilityOptions options_;
  std::vector<double> first_;   // the first n finite losses
  std::vector<double> recent_;  // the last n finite losses
  std::vector<std::int64_t> recent_steps_;
};

// Follows a run while it trains: fed every metrics line, it says when the run has diverged
// (O(window) per line), for stability.stop_on_divergence, and gives the report of
// everything seen.
class StabilityMonitor {
 public:
  StabilityMonitor(const StabilityOptions& options, RunMetrics earlier);  // earlier: a resumed run's lines
  // Records the line; true once the run has diverged.
  bool observe(const nlohmann::json& line);
  StabilityReport report() const { return analyze_stability(metrics_, options_); }

 private:
  void check(const StepRecord& r);
  StabilityOptions options_;
  RunMetrics metrics_;
  DivergenceCheck divergence_;
  bool diverged_ = false;
};

// stability.json of a run folder, written atomically.
void write_stability(const std::filesystem::path& run_dir, const StabilityReport& report);

}  // namespace dark::metrics

namespace dark {
template <>
struct EnumNames<metrics::SpikeRule> {
  static constexpr std::array<std::pair<metrics::SpikeRule, std::string_view>, 2> table{
      {{metrics::SpikeRule::robust, "robust"}, {metrics::SpikeRule::ratio, "ratio"}}};
};
}  // namespace dark
