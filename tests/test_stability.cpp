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
#include "train/metrics/json_number.h"
#include "train/metrics/stability.h"

namespace dark::metrics {
namespace {

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

// A training curve of n steps: 2 + 4 exp(-step / 150) nats plus batch noise of standard
// deviation `noise`, Gaussian or, with heavy_tails, Student t with 6 degrees of freedom scaled
// to that sd (hard batches: about one step in 1400 lies over 4.6 sd above the curve).
std::vector<double> noisy_curve(int n, double noise, bool heavy_tails, std::uint64_t seed) {
  constexpr int kDof = 6;
  Normal z(seed);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    double e = z();
    if (heavy_tails) {  // t = Z / sqrt(chi2_dof / dof), whose sd is sqrt(dof / (dof - 2))
      double chi2 = 0;
      for (int k = 0; k < kDof; ++k) chi2 += std::pow(z(), 2);
      e = e / std::sqrt(chi2 / kDof) / std::sqrt(kDof / (kDof - 2.0));
    }
    out.push_back(2.0 + 4.0 * std::exp(-i / 150.0) + noise * e);
  }
  return out;
}

TEST(RobustSpikes, PureNoiseGivesNoSpikesAtAnyBatchNoiseLevel) {
  // Per-step sds from a large batch (0.01 nats) to batch size 4 (0.15, measured on SmolLM2's
  // softmax control), over 400 steps (the experiments' runs are 80-400 steps long). The
  // softmax controls of the experiments reached at most 6.9 noise sd (docs/results.md 4.1);
  // noise with heavier tails than these would need a higher threshold.
  int ratio_rule_spikes = 0;
  for (const double noise : {0.01, 0.03, 0.08, 0.15})
    for (const bool heavy : {false, true})
      for (std::uint64_t seed = 1; seed <= 5; ++seed) {
        const auto steps = curve(noisy_curve(400, noise, heavy, seed));
        const StabilityReport r = analyze_robust(steps);
        EXPECT_TRUE(r.loss_spikes.empty()) << "noise " << noise << (heavy ? " t6" : "") << " seed " << seed << ": "
                                           << r.loss_spikes.size() << " spikes, first at step "
                                           << (r.loss_spikes.empty() ? 0 : r.loss_spikes[0].step);
        ratio_rule_spikes += static_cast<int>(analyze(steps).loss_spikes.size());
      }
  // The ratio rule, for comparison, fires on the noisiest curves (a loss of 2 x 1.2 is 0.4 nats
  // above the median: 2.7 sd at noise 0.15).
  EXPECT_GT(ratio_rule_spikes, 0);
}

// Batch noise of standard deviation `noise` around a flat loss of 3 nats (a run late in
// training), where heights can be checked exactly.
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

TEST(RobustSpikes, TheLargestExcursionIsTheNoiseFloorOrTheHighestSpike) {
  std::vector<double> losses = flat_noise(500, 0.05, 13);
  const Excursion noise = analyze_robust(curve(losses)).loss_excursion;
  // 500 normal steps reach about 3 sd (a robust sd estimated from 50 of them: a little more).
  EXPECT_GT(noise.noise_units, 2.0);
  EXPECT_LT(noise.noise_units, 5.0);
  EXPECT_NEAR(noise.height, noise.noise_units * 0.05, 0.06);
  losses[400] += 0.9;
  std::vector<std::int64_t> steps;
  for (std::int64_t i = 1; i <= static_cast<std::int64_t>(losses.size()); ++i) steps.push_back(i);
  const Excursion spiked = largest_excursion(steps, losses, 50);
  EXPECT_EQ(spiked.height_step, 401);
  EXPECT_EQ(spiked.noise_units_step, 401);
  EXPECT_NEAR(spiked.height, 0.9, 0.15);
}

TEST(RobustSpikes, ASpikeSmallerThanTheMarginOrTheNoiseIsNotOne) {
  std::vector<double> losses = flat_noise(400, 0.01, 3);
  losses[200] += 0.2;  // 20 sd of this noise, but under the 0.25-nat margin
  EXPECT_TRUE(analyze_robust(curve(losses)).loss_spikes.empty());
  std::vector<double> noisy = flat_noise(400, 0.15, 3);
  noisy[200] += 0.5;  // above the margin, but only ~3 sd of this noise
  EXPECT_TRUE(analyze_robust(curve(noisy)).loss_spikes.empty());
}

// A pretrained model finetuned at too high a rate without warm-up: the second step blows up
// from 4.4 to 13 nats and the loss settles far above where it started.
TEST(RobustSpikes, ABlowUpOnTheSecondStepIsASpike) {
  std::vector<double> losses = flat_noise(80, 0.15, 17);
  const double start = losses[0];
  losses[1] += 4.0, losses[2] += 8.5, losses[3] += 5.0;
  for (std::size_t i = 4; i < losses.size(); ++i) losses[i] += 2.5;
  const StabilityReport r = analyze_robust(curve(losses));
  ASSERT_EQ(r.loss_spikes.size(), 1u);
  const Spike& s = r.loss_spikes[0];
  EXPECT_EQ(s.step, 2);
  EXPECT_DOUBLE_EQ(s.median, start);  // the baseline is the first step
  EXPECT_NEAR(s.height, 8.5, 0.5);    // at its peak, step 3
  EXPECT_FALSE(s.recovery_steps.has_value());  // 2.5 nats above where it started for good
  // The noise level of the first steps comes from the run's step-to-step differences: 0.15.
  EXPECT_NEAR(s.noise_units, s.height / 0.15, 0.4 * s.height / 0.15);
  // The same curve without the blow-up: nothing.
  EXPECT_TRUE(analyze_robust(curve(flat_noise(80, 0.15, 17))).loss_spikes.empty());
}

// The steep start of a run from scratch (9 nats falling to 2, 0.3 nats in the first steps):
// the spread of the values over a window is far above the batch noise there, the spread of
// their differences is not. A 2.9-nat one-step spike at step 34 (as in redraw_shock) is found.
TEST(RobustSpikes, ASpikeOnTheSteepStartOfARunIsFound) {
  Normal z(19);
  std::vector<double> losses;
  for (int i = 0; i < 200; ++i) losses.push_back(2.0 + 7.0 * std::exp(-i / 25.0) + 0.05 * z());
  EXPECT_TRUE(analyze_robust(curve(losses)).loss_spikes.empty());
  losses[33] += 2.9;
  const StabilityReport r = analyze_robust(curve(losses));
  ASSERT_EQ(r.loss_spikes.size(), 1u);
  EXPECT_EQ(r.loss_spikes[0].step, 34);
  // The level, a median of the previous 10 steps, sits ~0.4 nats above a curve falling 0.08 a step.
  EXPECT_NEAR(r.loss_spikes[0].height, 2.9 - 0.4, 0.2);
  EXPECT_EQ(*r.loss_spikes[0].recovery_steps, 1);
  // The robust spread of the values themselves over the 33 steps before is over 1.5 nats: that
  // would have put this spike under 2 sd, below any useful threshold.
  std::vector<double> before(losses.begin(), losses.begin() + 33);
  EXPECT_LT(2.9 / robust_spread(before).sd, 2.0);
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
  steps[199].grad_norm *= 6.0;  // x6: log 6 = 1.8 above, ~18 sd, and over grad_margin 4
  steps[249].grad_norm *= 3.0;  // ~11 sd but under grad_margin 4: not a spike
  const StabilityReport r = analyze_robust(steps);
  ASSERT_EQ(r.grad_spikes.size(), 1u);
  EXPECT_EQ(r.grad_spikes[0].step, 200);
  EXPECT_NEAR(r.grad_spikes[0].height, std::log(6.0), 0.25);
  EXPECT_NEAR(r.grad_spikes[0].ratio, 6.0, 1.5);
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
  const train::RunConfig c = train::parse_config(doc);
  EXPECT_EQ(c.stability.window, 20);
  EXPECT_TRUE(c.stability.stop_on_divergence);
  EXPECT_DOUBLE_EQ(c.stability.grad_factor, 2.0);
  EXPECT_EQ(to_json(train::parse_config(to_json(c))), to_json(c));
  dark::testing::expect_error([] { train::parse_config({{"stability", {{"loss_factor", 1.0}}}}); },
                              {"config: stability.loss_factor: expected a number > 1, got 1.0"});
  dark::testing::expect_error([] { train::parse_config({{"stability", {{"windw", 3}}}}); },
                              {"config: stability.windw: unknown key (did you mean stability.window?)"});
  bool listed = false;
  for (const train::ConfigKey& k : train::config_keys()) listed = listed || k.path == "stability.stop_on_divergence";
  EXPECT_TRUE(listed);
}

}  // namespace
}  // namespace dark::metrics
