// The stability metrics on synthetic curves: spike detection (flat, injected, slow decay,
// short history at the start), divergence (non-finite, skipped, a median loss above the initial
// loss after warm-up), gradient-norm spikes, validation summaries; the config section round-trips.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

StabilityReport analyze(const std::vector<StepRecord>& steps, std::int64_t warmup = 0) {
  StabilityOptions o;
  o.warmup_steps = warmup;
  return analyze_stability(steps, {}, o);
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
  EXPECT_EQ(analyze_stability(steps, {}, tighter).grad_spikes.size(), 2u);
}

TEST(Stability, FinalAndBestValidation) {
  const std::vector<EvalRecord> evals = {{10, 3.0, 20.1, 0.2}, {20, 2.5, 12.2, 0.3}, {30, 2.7, 14.9, 0.28}};
  const StabilityReport r = analyze_stability(curve({3, 3, 3}), evals, {});
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
  const StabilityReport f = analyze_stability(curve({3, 3, 3}), finetune, {});
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
