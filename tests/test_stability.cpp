// The stability metrics on synthetic curves. The robust spike detector (the default): pure
// noise at several batch-noise levels, Gaussian and heavy-tailed, gives no spikes; planted
// spikes of known height and recovery are found with that height and recovery, in the loss and
// in the gradient norm. The ratio rule of earlier reports (flat, injected, slow decay, short
// history at the start); divergence (non-finite, skipped, a median loss above the initial loss
// after warm-up); validation summaries; metrics lines; the config section round-trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "test_util.h"
#include "train/config.h"
#include "train/stability.h"

namespace dark::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Steps 1..n with the given losses and a grad norm of 1 everywhere.
std::vector<StepRecord> curve(const std::vector<double>& losses) {
  std::vector<StepRecord> out;
  for (std::size_t i = 0; i < losses.size(); ++i) out.push_back({static_cast<std::int64_t>(i + 1), losses[i], 1.0, false});
  return out;
}

RunMetrics metrics_of(const std::vector<StepRecord>& steps, const std::vector<EvalRecord>& evals = {}) {
  RunMetrics m;
  m.steps = steps;
  m.evals = evals;
  return m;
}

// Under the ratio rule, the rule the tests below were written for.
StabilityReport analyze(const std::vector<StepRecord>& steps, std::int64_t warmup = 0) {
  StabilityOptions o;
  o.rule = SpikeRule::ratio;
  o.warmup_steps = warmup;
  return analyze_stability(metrics_of(steps), o);
}

StabilityReport analyze_robust(const std::vector<StepRecord>& steps) { return analyze_stability(metrics_of(steps), {}); }

// Standard normal numbers from a fixed-seed mt19937_64 by Box-Muller (the same on every
// standard library, unlike std::normal_distribution).
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : bits_(seed) {}
  double operator()() {
    const double u1 = (static_cast<double>(bits_() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = static_cast<double>(bits_() >> 11) / 9007199254740992.0;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::mt19937_64 bits_;
};

// A training curve: 2 + 4 exp(-step / 150) nats plus batch noise of standard deviation
// `noise` (Gaussian, or Student t with 4 degrees of freedom scaled to that sd: hard batches).
std::vector<double> noisy_curve(int n, double noise, bool heavy_tails, std::uint64_t seed) {
  Normal z(seed);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    double e = z();
    if (heavy_tails) {  // t_4 = Z / sqrt(chi2_4 / 4), whose sd is sqrt(2)
      double chi2 = 0;
      for (int k = 0; k < 4; ++k) chi2 += std::pow(z(), 2);
      e = e / std::sqrt(chi2 / 4) / std::sqrt(2.0);
    }
    out.push_back(2.0 + 4.0 * std::exp(-i / 150.0) + noise * e);
  }
  return out;
}

TEST(RobustSpikes, PureNoiseGivesNoSpikesAtAnyBatchNoiseLevel) {
  // Per-step sds from a large batch (0.01 nats) to batch size 4 (0.15, measured on SmolLM2's
  // softmax control); heavy tails put single steps 4-6 sd out.
  int ratio_rule_spikes = 0;
  for (const double noise : {0.01, 0.03, 0.08, 0.15})
    for (const bool heavy : {false, true})
      for (std::uint64_t seed = 1; seed <= 5; ++seed) {
        const auto steps = curve(noisy_curve(1000, noise, heavy, seed));
        const StabilityReport r = analyze_robust(steps);
        EXPECT_TRUE(r.loss_spikes.empty()) << "noise " << noise << (heavy ? " t4" : "") << " seed " << seed << ": "
                                           << r.loss_spikes.size() << " spikes, first at step "
                                           << (r.loss_spikes.empty() ? 0 : r.loss_spikes[0].step);
        ratio_rule_spikes += static_cast<int>(analyze(steps).loss_spikes.size());
      }
  // The ratio rule, for comparison, fires on the noisiest curves (a loss of 2 x 1.2 is 0.4 nats
  // above the median: 2.7 sd at noise 0.15).
  EXPECT_GT(ratio_rule_spikes, 0);
}

// Batch noise of standard deviation `noise` around a flat loss of 3 nats (a run late in
// training). On a falling curve the baseline, a median of the previous window, lags behind the
// curve by its fall over half a window, so heights come out lower by that much: conservative.
std::vector<double> flat_noise(int n, double noise, std::uint64_t seed) {
  Normal z(seed);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(3.0 + noise * z());
  return out;
}

TEST(RobustSpikes, PlantedSpikesAreFoundWithTheirHeightAndRecovery) {
  for (const double noise : {0.02, 0.05}) {
    std::vector<double> losses = flat_noise(600, noise, 7);
    // Step 301 jumps by 1.5 nats and decays over 4 steps (heights 1.5, 1.0, 0.8, 0.6, 0): back
    // within the noise band (6 sd) 4 steps after it started. Step 451: 0.8 nats for one step.
    const double rise[] = {1.5, 1.0, 0.8, 0.6};
    for (int i = 0; i < 4; ++i) losses[300 + i] += rise[i];
    losses[450] += 0.8;
    const StabilityReport r = analyze_robust(curve(losses));
    ASSERT_EQ(r.loss_spikes.size(), 2u) << "noise " << noise;
    const Spike& a = r.loss_spikes[0];
    EXPECT_EQ(a.step, 301);
    // The height is measured against the median of the window before: the noise on the peak
    // and on the median is all that separates it from 1.5.
    EXPECT_NEAR(a.height, 1.5, 3 * noise) << "noise " << noise;
    EXPECT_NEAR(a.noise_units, 1.5 / noise, 0.35 * 1.5 / noise) << "noise " << noise;
    ASSERT_TRUE(a.recovery_steps.has_value());
    EXPECT_EQ(*a.recovery_steps, 4) << "noise " << noise;
    const Spike& b = r.loss_spikes[1];
    EXPECT_EQ(b.step, 451);
    EXPECT_NEAR(b.height, 0.8, 3 * noise);
    ASSERT_TRUE(b.recovery_steps.has_value());
    EXPECT_EQ(*b.recovery_steps, 1);
    ASSERT_TRUE(r.largest_loss_spike.has_value());
    EXPECT_EQ(r.largest_loss_spike->step, 301);
  }
}

TEST(RobustSpikes, ASpikeSmallerThanTheMarginOrTheNoiseIsNotOne) {
  std::vector<double> losses = flat_noise(400, 0.01, 3);
  losses[200] += 0.2;  // 20 sd of this noise, but under the 0.25-nat margin
  EXPECT_TRUE(analyze_robust(curve(losses)).loss_spikes.empty());
  std::vector<double> noisy = flat_noise(400, 0.15, 3);
  noisy[200] += 0.5;  // above the margin, but only ~3 sd of this noise
  EXPECT_TRUE(analyze_robust(curve(noisy)).loss_spikes.empty());
}

TEST(RobustSpikes, ALastingRiseIsOneSpikeThatDoesNotRecover) {
  std::vector<double> losses = flat_noise(400, 0.02, 11);
  for (int i = 250; i < 400; ++i) losses[i] += 1.0;  // a new, higher plateau
  const StabilityReport r = analyze_robust(curve(losses));
  ASSERT_EQ(r.loss_spikes.size(), 1u);
  EXPECT_EQ(r.loss_spikes[0].step, 251);
  EXPECT_FALSE(r.loss_spikes[0].recovery_steps.has_value());  // not back within the window (50 steps)
  EXPECT_TRUE(r.to_json()["loss_spikes"][0]["recovery_steps"].is_null());
}

TEST(RobustSpikes, GradientNormSpikesAreJudgedOnALogScale) {
  Normal z(5);
  auto steps = curve(std::vector<double>(300, 3.0));
  for (auto& s : steps) s.grad_norm = 0.5 * std::exp(0.1 * z());  // multiplicative noise, 10%
  steps[199].grad_norm *= 4.0;  // x4: log 4 = 1.39 above, ~14 sd, and over grad_factor 2
  steps[249].grad_norm *= 1.8;  // ~6 sd but under grad_factor 2: not a spike
  const StabilityReport r = analyze_robust(steps);
  ASSERT_EQ(r.grad_spikes.size(), 1u);
  EXPECT_EQ(r.grad_spikes[0].step, 200);
  EXPECT_NEAR(r.grad_spikes[0].height, std::log(4.0), 0.25);
  EXPECT_NEAR(r.grad_spikes[0].ratio, 4.0, 1.0);
  EXPECT_EQ(*r.grad_spikes[0].recovery_steps, 1);
  EXPECT_TRUE(r.loss_spikes.empty());
}

TEST(RobustSpikes, RobustSpreadIsTheScaledMedianAbsoluteDeviation) {
  const RobustSpread s = robust_spread({1, 2, 3, 4, 100});  // median 3, deviations 2 1 0 1 97 -> MAD 1
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_DOUBLE_EQ(s.sd, 1.4826);
  // For normal samples it estimates the standard deviation.
  Normal z(9);
  std::vector<double> v;
  for (int i = 0; i < 20000; ++i) v.push_back(5.0 + 0.3 * z());
  EXPECT_NEAR(robust_spread(v).sd, 0.3, 0.01);
}

TEST(Stability, FlatCurveHasNoSpikes) {
  const StabilityReport r = analyze(curve(std::vector<double>(200, 3.0)));
  EXPECT_TRUE(r.loss_spikes.empty());
  EXPECT_TRUE(r.grad_spikes.empty());
  EXPECT_FALSE(r.largest_loss_spike.has_value());
  EXPECT_FALSE(r.diverged);
  EXPECT_EQ(r.steps, 200);
}

TEST(Stability, SlowDecayHasNoSpikes) {
  std::vector<double> losses;
  for (int i = 0; i < 500; ++i) losses.push_back(2.0 + 3.5 * std::exp(-i / 80.0));
  EXPECT_TRUE(analyze(curve(losses)).loss_spikes.empty());
}

TEST(Stability, InjectedSpikesAreCountedWithTheirStepsAndLargestRatio) {
  std::vector<double> losses(300, 2.0);
  losses[0] = 4.0;    // the initial loss, above every spike: no divergence
  losses[99] = 2.6;   // step 100: ratio 1.3
  losses[199] = 3.0;  // step 200: ratio 1.5
  losses[249] = 2.3;  // step 250: ratio 1.15, under the 1.2 threshold
  const StabilityReport r = analyze(curve(losses));
  ASSERT_EQ(r.loss_spikes.size(), 2u);
  EXPECT_EQ(r.loss_spikes[0].step, 100);
  EXPECT_DOUBLE_EQ(r.loss_spikes[0].ratio, 1.3);
  EXPECT_EQ(r.loss_spikes[1].step, 200);
  ASSERT_TRUE(r.largest_loss_spike.has_value());
  EXPECT_EQ(r.largest_loss_spike->step, 200);
  EXPECT_DOUBLE_EQ(r.largest_loss_spike->ratio, 1.5);
  EXPECT_DOUBLE_EQ(r.largest_loss_spike->median, 2.0);
  EXPECT_FALSE(r.diverged);
}

TEST(Stability, WindowAndFactorAreConfigurable) {
  std::vector<double> losses(100, 2.0);
  losses[50] = 2.3;  // ratio 1.15
  EXPECT_TRUE(find_spikes({}, {}, 50, 1.2).empty());
  std::vector<std::int64_t> steps;
  for (int i = 1; i <= 100; ++i) steps.push_back(i);
  EXPECT_TRUE(find_spikes(steps, losses, 50, 1.2).empty());
  ASSERT_EQ(find_spikes(steps, losses, 50, 1.1).size(), 1u);
  // A window of 3: the median of steps 48..50 only.
  losses[47] = losses[48] = losses[49] = 1.0;
  const auto spikes = find_spikes(steps, losses, 3, 1.2);
  ASSERT_EQ(spikes.size(), 2u);  // step 51 (2.3 vs 1.0) and step 52 (2.0 vs median(1, 1, 2.3) = 1)
  EXPECT_EQ(spikes[0].step, 51);
  EXPECT_DOUBLE_EQ(spikes[0].median, 1.0);
  EXPECT_EQ(spikes[1].step, 52);
}

TEST(Stability, ShortHistoryAtTheStartUsesWhatThereIs) {
  std::vector<double> losses(60, 4.0);
  losses[3] = 9.0;   // step 4: only 3 values before it, fewer than window / 5 = 10: not tested
  losses[14] = 6.0;  // step 15: 14 values before it (one of them 9.0), median 4.0: a spike
  const StabilityReport r = analyze(curve(losses), /*warmup=*/20);
  ASSERT_EQ(r.loss_spikes.size(), 1u);
  EXPECT_EQ(r.loss_spikes[0].step, 15);
  EXPECT_DOUBLE_EQ(r.loss_spikes[0].median, 4.0);
  EXPECT_DOUBLE_EQ(r.loss_spikes[0].ratio, 1.5);
  EXPECT_FALSE(r.diverged);  // both rises above the initial 4.0 lie inside warm-up
}

TEST(Stability, NonFiniteLossDiverges) {
  std::vector<double> losses(40, 3.0);
  losses[29] = kNaN;
  const StabilityReport r = analyze(curve(losses));
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.divergence_step, 30);
  EXPECT_EQ(r.divergence_reason, "non-finite loss");
  EXPECT_TRUE(r.loss_spikes.empty());  // a NaN is not a spike and enters no median
}

TEST(Stability, SkippedStepDiverges) {
  auto steps = curve(std::vector<double>(20, 3.0));
  steps[11].skipped = true;
  const StabilityReport r = analyze(steps);
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.divergence_step, 12);
}

TEST(Stability, RiseAboveTheInitialLossAfterWarmupDiverges) {
  std::vector<double> losses;
  for (int i = 0; i < 100; ++i) losses.push_back(5.0 - 0.02 * i);  // 5.0 down to 3.02
  losses[4] = 4.9;  // the initial loss is the highest of the first 10 steps: 5.0 (step 1)
  losses[30] = 5.8;  // one hard batch: a spike, not divergence (the median of 10 stays low)
  for (int i = 80; i < 100; ++i) losses[i] = 3.0 + 0.2 * (i - 79);  // climbs: 3.2, 3.4, ..., 7.0
  const StabilityReport r = analyze(curve(losses), /*warmup=*/10);
  EXPECT_TRUE(r.diverged);
  // Steps 86-95 (indices 85..94) hold 4.2 ... 6.0: median (5.0 + 5.2) / 2 = 5.1 > 5.0; steps
  // 85-94 have median 4.9.
  EXPECT_EQ(r.divergence_step, 95);
  EXPECT_NE(r.divergence_reason.find("of steps 86-95 above the initial loss 5"), std::string::npos) << r.divergence_reason;
  EXPECT_FALSE(analyze(curve(std::vector<double>(losses.begin(), losses.begin() + 90)), 10).diverged);
}

// A finetuning run starts at its pretrained loss and stays near it: noise around a flat
// curve must not count as divergence.
TEST(Stability, NoisyFlatFinetuningCurveDoesNotDiverge) {
  std::vector<double> losses;
  for (int i = 0; i < 300; ++i) losses.push_back(3.7 + 0.1 * std::sin(1.7 * i) + 0.05 * std::cos(5.3 * i));
  EXPECT_FALSE(analyze(curve(losses), 15).diverged);
  // Step-by-step comparison with the first step's loss would have fired on a third of them.
  int above_first = 0;
  for (std::size_t i = 15; i < losses.size(); ++i) above_first += losses[i] > losses[0];
  EXPECT_GT(above_first, 50);
}

TEST(Stability, GradientNormSpikesUseTheirOwnFactor) {
  auto steps = curve(std::vector<double>(120, 3.0));
  for (auto& s : steps) s.grad_norm = 0.5;
  steps[59].grad_norm = 0.9;   // ratio 1.8: under the default 2.0
  steps[89].grad_norm = 1.25;  // ratio 2.5
  const StabilityReport r = analyze(steps);
  EXPECT_TRUE(r.loss_spikes.empty());
  ASSERT_EQ(r.grad_spikes.size(), 1u);
  EXPECT_EQ(r.grad_spikes[0].step, 90);
  EXPECT_DOUBLE_EQ(r.grad_spikes[0].ratio, 2.5);
  StabilityOptions tighter;
  tighter.grad_factor = 1.5;
  tighter.rule = SpikeRule::ratio;
  EXPECT_EQ(analyze_stability(metrics_of(steps), tighter).grad_spikes.size(), 2u);
}

TEST(Stability, FinalAndBestValidation) {
  const std::vector<EvalRecord> evals = {{10, 3.0, 20.1, 0.2}, {20, 2.5, 12.2, 0.3}, {30, 2.7, 14.9, 0.28}};
  const StabilityReport r = analyze_stability(metrics_of(curve({3, 3, 3}), evals), {});
  ASSERT_TRUE(r.final_eval && r.best_eval);
  EXPECT_EQ(r.final_eval->step, 30);
  EXPECT_EQ(r.best_eval->step, 20);
  EXPECT_DOUBLE_EQ(r.best_eval->accuracy, 0.3);
  const auto j = r.to_json();
  EXPECT_EQ(j["best_eval"]["loss"], 2.5);
  EXPECT_EQ(j["loss_spike_count"], 0);
  EXPECT_FALSE(r.start_eval);  // no eval at step 0: not a finetuning run
  EXPECT_TRUE(j["start_eval"].is_null());

  // A finetuning run's step-0 eval is its starting point.
  std::vector<EvalRecord> finetune = evals;
  finetune.insert(finetune.begin(), EvalRecord{0, 4.0, 54.6, 0.1});
  const StabilityReport f = analyze_stability(metrics_of(curve({3, 3, 3}), finetune), {});
  ASSERT_TRUE(f.start_eval);
  EXPECT_DOUBLE_EQ(f.start_eval->loss, 4.0);
  EXPECT_EQ(f.to_json()["start_eval"]["accuracy"], 0.1);
}

TEST(Stability, MetricsLinesAndTheMonitor) {
  RunMetrics earlier;
  EXPECT_TRUE(earlier.add({{"step", 1}, {"loss", 5.0}, {"grad_norm", 1.0}}));
  EXPECT_FALSE(earlier.add({{"step", 1}, {"eval_loss", 4.9}, {"eval_perplexity", 134.3}, {"eval_accuracy", 0.1}}));
  StabilityOptions o;
  o.warmup_steps = 2;
  StabilityMonitor monitor(o, earlier);
  EXPECT_FALSE(monitor.observe({{"step", 2}, {"loss", 5.2}, {"grad_norm", 1.0}}));  // in warm-up
  EXPECT_FALSE(monitor.observe({{"step", 3}, {"loss", 4.0}, {"grad_norm", 1.0}}));
  EXPECT_TRUE(monitor.observe({{"step", 4}, {"skipped", true}, {"loss", nullptr}}));
  const StabilityReport r = monitor.report();
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.divergence_step, 4);
  EXPECT_EQ(r.final_eval->step, 1);
}

TEST(Stability, ConfigSectionIsValidatedAndRoundTrips) {
  nlohmann::json doc = {{"stability", {{"window", 20}, {"loss_factor", 1.5}, {"stop_on_divergence", true}}}};
  const RunConfig c = parse_config(doc);
  EXPECT_EQ(c.stability.window, 20);
  EXPECT_TRUE(c.stability.stop_on_divergence);
  EXPECT_DOUBLE_EQ(c.stability.grad_factor, 2.0);
  EXPECT_EQ(to_json(parse_config(to_json(c))), to_json(c));
  dark::testing::expect_error([] { parse_config({{"stability", {{"loss_factor", 1.0}}}}); },
                              {"config: stability.loss_factor: expected a number > 1, got 1.0"});
  dark::testing::expect_error([] { parse_config({{"stability", {{"windw", 3}}}}); },
                              {"config: stability.windw: unknown key (did you mean stability.window?)"});
  bool listed = false;
  for (const ConfigKey& k : config_keys()) listed = listed || k.path == "stability.stop_on_divergence";
  EXPECT_TRUE(listed);
}

}  // namespace
}  // namespace dark::train
