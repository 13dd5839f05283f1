// Loss and gradient-norm spikes, divergence and validation summaries of a run (see
// stability.h).
#include "train/metrics/stability.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/file_io.h"
#include "core/median.h"
#include "train/metrics/json_number.h"

namespace dark::metrics {
namespace {

using nlohmann::json;

json spike_json(const Spike& s) {
  return {{"step", s.step},
          {"value", finite_or_null(s.value)},
          {"median", finite_or_null(s.median)},
          {"ratio", finite_or_null(s.ratio)},
          {"height", finite_or_null(s.height)},
          {"noise_units", finite_or_null(s.noise_units)},
          {"recovery_steps", s.recovery_steps ? json(*s.recovery_steps) : json(nullptr)}};
}

json excursion_json(const Excursion& e) {
  return {{"noise_units", e.noise_units}, {"noise_units_step", e.noise_units_step}, {"height", e.height},
          {"height_step", e.height_step}};
}

json eval_json(const std::optional<EvalRecord>& e) {
  if (!e) return nullptr;
  return {{"step", e->step}, {"loss", e->loss}, {"perplexity", e->perplexity}, {"accuracy", e->accuracy}};
}

}  // namespace

SpikeCriteria loss_spike_criteria(const StabilityConfig& c) {
  return {c.rule, c.window, c.loss_sigmas, c.loss_margin, c.loss_factor, /*log_scale=*/false};
}

// On the log scale the margin log(grad_margin) means: the norm exceeds grad_margin x its level.
SpikeCriteria grad_spike_criteria(const StabilityConfig& c) {
  return {c.rule, c.window, c.grad_sigmas, std::log(c.grad_margin), c.grad_factor, /*log_scale=*/true};
}

RobustSpread robust_spread(const std::vector<double>& values) {
  if (values.empty()) return {kNaN, kNaN};
  RobustSpread r;
  r.median = median(values);
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (const double v : values) deviations.push_back(std::abs(v - r.median));
  r.sd = 1.4826 * median(std::move(deviations));  // the sd of a normal distribution with this MAD
  return r;
}

namespace {

// The values as the robust rule judges them: their logs when asked (non-positive ones become NaN).
std::vector<double> judged_values(const std::vector<double>& values, bool log_scale) {
  if (!log_scale) return values;
  std::vector<double> out;
  for (const double v : values) out.push_back(v > 0 ? std::log(v) : kNaN);
  return out;
}

// The robust sd of a series' noise: 1.4826 x the MAD of its step-to-step differences / sqrt(2).
// A trend cancels in a difference, so a falling loss curve does not pass for noise (over the 50
// steps of a run's steep start the plain MAD is several times the batch noise, and a real
// spike there would hide under it).
double noise_sd(const std::vector<double>& values) {
  std::vector<double> differences;
  for (std::size_t i = 1; i < values.size(); ++i) differences.push_back(values[i] - values[i - 1]);
  return differences.empty() ? 0.0 : robust_spread(differences).sd / std::sqrt(2.0);
}

// The robust rule's baseline before each value of a series (stability.h): the level, the
// median of the previous n = max(1, window / 5) values (a short median follows a falling curve,
// so heights are measured from where the curve is, not from where it was half a window ago);
// the noise, noise_sd over the previous `window` values. While fewer than n values precede (the
// first steps of a run, where a finetuning run without warm-up blows up), the noise is that of
// the whole series.
class RunningBaseline {
 public:
  RunningBaseline(const std::vector<double>& values, int window)
      : window_(static_cast<std::size_t>(window)), level_(static_cast<std::size_t>(std::max(1, window / 5))) {
    std::vector<double> finite;
    for (const double v : values)
      if (std::isfinite(v)) finite.push_back(v);
    whole_noise_ = noise_sd(finite);
  }
  // The baseline of the next value; empty before the first.
  std::optional<RobustSpread> next() const {
    if (history_.empty()) return std::nullopt;
    const auto last = [&](std::size_t n) {
      return std::vector<double>(history_.end() - static_cast<std::ptrdiff_t>(std::min(n, history_.size())), history_.end());
    };
    RobustSpread base;
    base.median = robust_spread(last(level_)).median;
    base.sd = history_.size() < level_ ? whole_noise_ : noise_sd(last(window_));
    return base;
  }
  void push(double v) { history_.push_back(v); }

 private:
  std::size_t window_, level_;
  double whole_noise_ = 0;
  std::vector<double> history_;  // finite values so far, oldest first
};

// Calls visit(i, value, baseline) for each finite judged value in order, with the baseline of
// the values before it (empty for the first).
template <typename Visit>
void for_each_with_baseline(const std::vector<double>& judged, int window, Visit visit) {
  RunningBaseline baseline(judged, window);
  for (std::size_t i = 0; i < judged.size(); ++i) {
    if (!std::isfinite(judged[i])) continue;
    visit(i, judged[i], baseline.next());
    baseline.push(judged[i]);
  }
}

std::vector<Spike> ratio_spikes(const std::vector<std::int64_t>& steps, const std::vector<double>& values, int window,
                                double factor) {
  const std::size_t min_history = static_cast<std::size_t>(std::max(1, window / 5));
  std::vector<Spike> spikes;
  std::vector<double> history;  // the finite values before i, oldest first
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (!std::isfinite(v)) continue;
    if (history.size() >= min_history) {
      const double m = median(
          std::vector<double>(history.end() - std::min<std::ptrdiff_t>(window, static_cast<std::ptrdiff_t>(history.size())),
                              history.end()));
      if (v > factor * m)
        spikes.push_back({steps[i], v, m, m > 0 ? v / m : std::numeric_limits<double>::infinity(), v - m, kNaN, std::nullopt});
    }
    history.push_back(v);
  }
  return spikes;
}

// The robust rule (stability.h): events that start above median + max(sigmas sd, margin) and
// end when the value is back within median + sigmas sd of the baseline frozen at their start,
// or after `window` steps. Values are judged on the log scale when asked (they must then be
// positive; others are skipped like NaN).
std::vector<Spike> robust_spikes(const std::vector<std::int64_t>& steps, const std::vector<double>& values,
                                 const SpikeCriteria& k) {
  const std::vector<double> judged = judged_values(values, k.log_scale);
  const auto raw = [&](double x) { return k.log_scale ? std::exp(x) : x; };
  std::vector<Spike> spikes;
  struct Open {
    std::int64_t start = 0;
    double median = 0, sd = 0, band = 0, peak = 0;
  };
  std::optional<Open> open;
  const auto close = [&](std::optional<std::int64_t> recovery) {
    const Open& o = *open;
    const double height = o.peak - o.median;
    spikes.push_back({o.start, raw(o.peak), raw(o.median), raw(o.median) > 0 ? raw(o.peak) / raw(o.median) : kNaN, height,
                      o.sd > 0 ? height / o.sd : std::numeric_limits<double>::infinity(), recovery});
    open.reset();
  };
  for_each_with_baseline(judged, k.window, [&](std::size_t i, double v, const std::optional<RobustSpread>& base) {
    if (open) {
      if (v <= open->band) close(steps[i] - open->start);
      else if (steps[i] - open->start >= k.window) close(std::nullopt);
      else open->peak = std::max(open->peak, v);
    } else if (base) {
      const double excess = v - base->median;
      if (excess > k.sigmas * base->sd && excess > k.margin)
        open = Open{steps[i], base->median, base->sd, base->median + k.sigmas * base->sd, v};
    }
  });
  if (open) close(std::nullopt);  // still high when the run ended
  return spikes;
}

}  // namespace

Excursion largest_excursion(const std::vector<std::int64_t>& steps, const std::vector<double>& values, int window,
                            bool log_scale) {
  DARK_CHECK(steps.size() == values.size() && window >= 1, "largest_excursion: ", steps.size(), " steps, ", values.size(),
             " values, window ", window);
  const std::vector<double> judged = judged_values(values, log_scale);
  Excursion e;
  for_each_with_baseline(judged, window, [&](std::size_t i, double v, const std::optional<RobustSpread>& base) {
    if (!base) return;
    const double excess = v - base->median;
    if (excess > e.height) e.height = excess, e.height_step = steps[i];
    if (base->sd > 0 && excess / base->sd > e.noise_units) e.noise_units = excess / base->sd, e.noise_units_step = steps[i];
  });
  return e;
}

std::vector<Spike> find_spikes(const std::vector<std::int64_t>& steps, const std::vector<double>& values,
                               const SpikeCriteria& criteria) {
  DARK_CHECK(steps.size() == values.size(), "find_spikes: ", steps.size(), " steps but ", values.size(), " values");
  DARK_CHECK(criteria.window >= 1, "find_spikes: window must be >= 1, got ", criteria.window);
  if (criteria.rule == SpikeRule::ratio) {
    std::vector<Spike> spikes = ratio_spikes(steps, values, criteria.window, criteria.factor);
    if (criteria.log_scale)
      for (Spike& s : spikes) s.height = std::log(s.ratio);
    return spikes;
  }
  return robust_spikes(steps, values, criteria);
}

std::vector<Spike> find_spikes(const std::vector<std::int64_t>& steps, const std::vector<double>& values, int window,
                               double factor) {
  SpikeCriteria k;
  k.rule = SpikeRule::ratio;
  k.window = window;
  k.factor = factor;
  return find_spikes(steps, values, k);
}

StabilityReport analyze_stability(const RunMetrics& metrics, const StabilityOptions& options) {
  const std::vector<StepRecord>& steps = metrics.steps;
  StabilityReport r;
  r.rule = options.rule;
  r.steps = static_cast<std::int64_t>(steps.size());
  std::vector<std::int64_t> step_numbers;
  std::vector<double> losses, grad_norms;
  for (const StepRecord& s : steps) {
    step_numbers.push_back(s.step);
    losses.push_back(s.skipped ? kNaN : s.loss);
    grad_norms.push_back(s.skipped ? kNaN : s.grad_norm);
  }
  r.loss_spikes = find_spikes(step_numbers, losses, loss_spike_criteria(options));
  r.grad_spikes = find_spikes(step_numbers, grad_norms, grad_spike_criteria(options));
  for (const Spike& s : r.loss_spikes)
    if (!r.largest_loss_spike || s.height > r.largest_loss_spike->height) r.largest_loss_spike = s;
  r.loss_excursion = largest_excursion(step_numbers, losses, options.window);
  r.grad_excursion = largest_excursion(step_numbers, grad_norms, options.window, /*log_scale=*/true);

  DivergenceCheck divergence(options);
  for (const StepRecord& s : steps) {
    std::string why = divergence.observe(s);
    if (why.empty()) continue;
    r.diverged = true;
    r.divergence_step = s.step;
    r.divergence_reason = std::move(why);
    break;
  }
  for (const EvalRecord& e : metrics.evals) {
    if (e.step == 0) r.start_eval = e;
    r.final_eval = e;
    if (std::isfinite(e.loss) && (!r.best_eval || e.loss < r.best_eval->loss)) r.best_eval = e;
  }
  r.redraw = analyze_redraw_shocks(steps, metrics.redraws, options.redraw_window, options.redraw_interval);
  return r;
}

json StabilityReport::to_json() const {
  json spikes = json::array(), grads = json::array();
  for (const Spike& s : loss_spikes) spikes.push_back(spike_json(s));
  for (const Spike& s : grad_spikes) grads.push_back(spike_json(s));
  return {{"steps", steps},
          {"loss_spike_count", loss_spikes.size()},
          {"largest_loss_spike", largest_loss_spike ? spike_json(*largest_loss_spike) : json(nullptr)},
          {"loss_spikes", spikes},
          {"grad_spike_count", grad_spikes.size()},
          {"grad_spikes", grads},
          {"diverged", diverged},
          {"divergence_step", diverged ? json(divergence_step) : json(nullptr)},
          {"divergence_reason", divergence_reason},
          {"stopped_on_divergence", stopped_on_divergence},
          {"start_eval", eval_json(start_eval)},
          {"final_eval", eval_json(final_eval)},
          {"best_eval", eval_json(best_eval)},
          {"spike_rule", std::string(enum_name(rule))},
          {"loss_excursion", excursion_json(loss_excursion)},
          {"grad_excursion", excursion_json(grad_excursion)},
          {"redraw_shocks", redraw.to_json()}};
}

std::string DivergenceCheck::observe(const StepRecord& r) {
  if (r.skipped) return "skipped step (non-finite loss or gradient)";
  if (!std::isfinite(r.loss)) return "non-finite loss";
  const std::size_t n = static_cast<std::size_t>(options_.divergence_span());
  if (first_.size() < n) {
    first_.push_back(r.loss);
    return "";
  }
  recent_.push_back(r.loss);
  recent_steps_.push_back(r.step);
  if (recent_.size() > n) recent_.erase(recent_.begin()), recent_steps_.erase(recent_steps_.begin());
  if (recent_.size() < n || r.step <= options_.warmup_steps) return "";
  const double initial = *std::max_element(first_.begin(), first_.end());
  const double recent_median = median(recent_);
  if (recent_median <= initial) return "";
  return str("median loss ", recent_median, " of steps ", recent_steps_.front(), "-", r.step, " above the initial loss ", initial,
             " (the highest of the first ", n, " steps) after warm-up");
}

StabilityMonitor::StabilityMonitor(const StabilityOptions& options, RunMetrics earlier)
    : options_(options), metrics_(std::move(earlier)), divergence_(options) {
  for (const StepRecord& s : metrics_.steps) check(s);
}

void StabilityMonitor::check(const StepRecord& r) {
  diverged_ = !divergence_.observe(r).empty() || diverged_;
}

bool StabilityMonitor::observe(const json& line) {
  if (metrics_.add(line)) check(metrics_.steps.back());
  return diverged_;
}

void write_stability(const std::filesystem::path& run_dir, const StabilityReport& report) {
  write_file_atomic(run_dir / "stability.json", report.to_json().dump(2) + "\n");
}

}  // namespace dark::metrics
