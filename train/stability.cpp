// Loss and gradient-norm spikes, divergence and validation summaries of a run (see
// stability.h).
#include "train/stability.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/file_io.h"
#include "train/config.h"

namespace dark::train {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double median_of(std::vector<double> v) {
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)) + upper) / 2;
}

json spike_json(const Spike& s) {
  return {{"step", s.step}, {"value", s.value}, {"median", s.median}, {"ratio", s.ratio}};
}

json eval_json(const std::optional<EvalRecord>& e) {
  if (!e) return nullptr;
  return {{"step", e->step}, {"loss", e->loss}, {"perplexity", e->perplexity}, {"accuracy", e->accuracy}};
}

// A JSON number, or NaN for null / absent (non-finite values are written as null).
double number_or_nan(const json& line, const char* key) {
  const auto it = line.find(key);
  return it != line.end() && it->is_number() ? it->get<double>() : kNaN;
}

}  // namespace

StabilityOptions stability_options(const RunConfig& config) {
  StabilityOptions o;
  static_cast<StabilityConfig&>(o) = config.stability;
  o.warmup_steps = config.schedule.warmup_steps;
  return o;
}

std::vector<Spike> find_spikes(const std::vector<std::int64_t>& steps, const std::vector<double>& values, int window,
                               double factor) {
  DARK_CHECK(steps.size() == values.size(), "find_spikes: ", steps.size(), " steps but ", values.size(), " values");
  DARK_CHECK(window >= 1, "find_spikes: window must be >= 1, got ", window);
  const std::size_t min_history = static_cast<std::size_t>(std::max(1, window / 5));
  std::vector<Spike> spikes;
  std::vector<double> history;  // the finite values before i, oldest first
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (!std::isfinite(v)) continue;
    if (history.size() >= min_history) {
      const double m = median_of(
          std::vector<double>(history.end() - std::min<std::ptrdiff_t>(window, static_cast<std::ptrdiff_t>(history.size())),
                              history.end()));
      if (v > factor * m) spikes.push_back({steps[i], v, m, m > 0 ? v / m : std::numeric_limits<double>::infinity()});
    }
    history.push_back(v);
  }
  return spikes;
}

StabilityReport analyze_stability(const std::vector<StepRecord>& steps, const std::vector<EvalRecord>& evals,
                                  const StabilityOptions& options) {
  StabilityReport r;
  r.steps = static_cast<std::int64_t>(steps.size());
  std::vector<std::int64_t> step_numbers;
  std::vector<double> losses, grad_norms;
  for (const StepRecord& s : steps) {
    step_numbers.push_back(s.step);
    losses.push_back(s.skipped ? kNaN : s.loss);
    grad_norms.push_back(s.skipped ? kNaN : s.grad_norm);
  }
  r.loss_spikes = find_spikes(step_numbers, losses, options.window, options.loss_factor);
  r.grad_spikes = find_spikes(step_numbers, grad_norms, options.window, options.grad_factor);
  for (const Spike& s : r.loss_spikes)
    if (!r.largest_loss_spike || s.ratio > r.largest_loss_spike->ratio) r.largest_loss_spike = s;

  DivergenceCheck divergence(options);
  for (const StepRecord& s : steps) {
    std::string why = divergence.observe(s);
    if (why.empty()) continue;
    r.diverged = true;
    r.divergence_step = s.step;
    r.divergence_reason = std::move(why);
    break;
  }
  for (const EvalRecord& e : evals) {
    if (e.step == 0) r.start_eval = e;
    r.final_eval = e;
    if (std::isfinite(e.loss) && (!r.best_eval || e.loss < r.best_eval->loss)) r.best_eval = e;
  }
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
          {"best_eval", eval_json(best_eval)}};
}

bool RunMetrics::add(const json& line) {
  if (!line.is_object() || !line.contains("step")) return false;
  const std::int64_t step = line.at("step").get<std::int64_t>();
  if (line.contains("eval_loss")) {
    evals.push_back({step, number_or_nan(line, "eval_loss"), number_or_nan(line, "eval_perplexity"),
                     number_or_nan(line, "eval_accuracy")});
    return false;
  }
  if (!line.contains("loss") && !line.contains("skipped")) return false;
  steps.push_back({step, number_or_nan(line, "loss"), number_or_nan(line, "grad_norm"), line.value("skipped", false)});
  return true;
}

RunMetrics read_metrics(const std::filesystem::path& metrics_jsonl) {
  RunMetrics m;
  std::ifstream in(metrics_jsonl);
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    DARK_CHECK(!j.is_discarded(), metrics_jsonl.string(), ":", number, ": not a JSON object");
    m.add(j);
  }
  return m;
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
  const double median = median_of(recent_);
  if (median <= initial) return "";
  return str("median loss ", median, " of steps ", recent_steps_.front(), "-", r.step, " above the initial loss ", initial,
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

}  // namespace dark::train
