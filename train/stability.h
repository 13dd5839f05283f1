// Training-stability metrics of a run: loss spikes, gradient-norm spikes, divergence, and the
// final and best validation numbers, computed from the lines of metrics.jsonl.
//
// Rules (defaults from the config section `stability`):
//   spike       a step whose value exceeds factor x the median of the previous `window`
//               finite values (loss_factor 1.2 for the loss, grad_factor 2.0 for the
//               gradient norm). A step is tested once at least max(1, window / 5) earlier
//               values exist, so the first steps of a run are judged against a median of ten
//               (window 50), not of one or two noisy values.
//   divergence  the first step that is skipped (non-finite loss or gradient), has a
//               non-finite loss, or, once warm-up (schedule.warmup_steps) is over, ends a
//               stretch of n = max(1, window / 5) steps whose median loss is above the
//               initial loss, the highest loss of the run's first n steps. Both sides are
//               taken over n steps because single batches are noisy: a finetuning run starts
//               at its pretrained loss, and one hard batch later must not read as divergence,
//               while a loss that climbs back above where training began and stays there does.
// The core, analyze_stability(), is a pure function of the step and eval records.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dark::train {

struct RunConfig;

// The stability section of a run config (train/config.cpp binds its rows to these members).
struct StabilityConfig {
  int window = 50;                  // previous steps whose median a value is compared with
  double loss_factor = 1.2;         // loss spike: loss > loss_factor x that median
  double grad_factor = 2.0;         // gradient-norm spike: grad_norm > grad_factor x that median
  bool stop_on_divergence = false;  // end a diverged run early (no final checkpoint), e.g. in sweeps
};

// What the analysis needs: the section's rules and the run's warm-up.
struct StabilityOptions : StabilityConfig {
  std::int64_t warmup_steps = 0;  // divergence by "loss above the initial loss" counts after this step
  int divergence_span() const { return window / 5 > 1 ? window / 5 : 1; }  // n in the rule above
};
StabilityOptions stability_options(const RunConfig& config);

// One optimizer step as metrics.jsonl records it. A skipped step has no usable grad_norm.
struct StepRecord {
  std::int64_t step = 0;  // 1-based
  double loss = 0;        // NaN when the loss was not finite
  double grad_norm = 0;   // NaN when unknown (skipped steps)
  bool skipped = false;
};
struct EvalRecord {
  std::int64_t step = 0;
  double loss = 0, perplexity = 0, accuracy = 0;
};

struct Spike {
  std::int64_t step = 0;
  double value = 0;   // the loss or gradient norm at that step
  double median = 0;  // median of the previous window
  double ratio = 0;   // value / median
};

struct StabilityReport {
  std::int64_t steps = 0;  // step records seen
  std::vector<Spike> loss_spikes, grad_spikes;
  std::optional<Spike> largest_loss_spike;  // highest ratio among loss_spikes
  bool diverged = false;
  std::int64_t divergence_step = 0;  // when diverged
  std::string divergence_reason;     // "non-finite loss", "skipped step", "median loss 6.1 of steps 81-90 above the initial loss 5.5 ..."
  std::optional<EvalRecord> final_eval, best_eval;  // best = lowest validation loss
  std::optional<EvalRecord> start_eval;  // the eval at step 0: a finetuning run's starting point
  bool stopped_on_divergence = false;  // set by the trainer when stability.stop_on_divergence ended the run

  nlohmann::json to_json() const;
};

// The spikes of a series: values[i] against the median of the up-to-`window` finite values
// before it. NaN values are never spikes and never enter a median.
std::vector<Spike> find_spikes(const std::vector<std::int64_t>& steps, const std::vector<double>& values, int window,
                               double factor);

StabilityReport analyze_stability(const std::vector<StepRecord>& steps, const std::vector<EvalRecord>& evals,
                                  const StabilityOptions& options);

// The step and eval records of a metrics.jsonl (missing file = none). Lines that are neither
// are ignored; a malformed line is an error naming the file and line.
struct RunMetrics {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  // Adds one metrics.jsonl object; returns true when it was a step record.
  bool add(const nlohmann::json& line);
};
RunMetrics read_metrics(const std::filesystem::path& metrics_jsonl);

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
  StabilityReport report() const { return analyze_stability(metrics_.steps, metrics_.evals, options_); }

 private:
  void check(const StepRecord& r);
  StabilityOptions options_;
  RunMetrics metrics_;
  DivergenceCheck divergence_;
  bool diverged_ = false;
};

// stability.json of a run folder, written atomically.
void write_stability(const std::filesystem::path& run_dir, const StabilityReport& report);

}  // namespace dark::train
