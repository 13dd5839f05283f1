// Redraw shocks from metrics (train/metrics/redraw_shock.h) on synthetic curves with planted jumps:
// the loss jump (K steps after minus K before), the held-out jump from the trainer's redraw
// lines, mean and worst, the nominal steps of a run without redraws, windows cut by the ends
// of the run; and the metrics lines themselves (redraw and attention statistics) as the
// trainer writes them and the reader reads them back.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/metrics/json_number.h"
#include "train/metrics/redraw_shock.h"
#include "train/metrics/run_metrics.h"

namespace dark::metrics {
namespace {

std::vector<StepRecord> flat(int n, double loss) {
  std::vector<StepRecord> out;
  for (int i = 1; i <= n; ++i) out.push_back({i, loss, 1.0, false});
  return out;
}

TEST(RedrawShock, LossJumpIsTheMeanOfKStepsAfterMinusKBefore) {
  auto steps = flat(100, 3.0);
  // Redraw at step 41: steps 41-44 rise by 0.4 (K = 4: mean rise 0.4); redraw at step 81:
  // steps 81, 82 rise by 0.2 (mean over 4: 0.1); step 79 sits 0.4 low (the before mean: -0.1).
  for (int s = 41; s <= 44; ++s) steps[s - 1].loss += 0.4;
  steps[80].loss += 0.2, steps[81].loss += 0.2;
  steps[78].loss -= 0.4;
  const RedrawShockReport r =
      analyze_redraw_shocks(steps, {{41, 3.10, 3.25}, {81, 3.00, 3.05}}, /*window=*/4, /*nominal_interval=*/40);
  EXPECT_FALSE(r.nominal);
  ASSERT_EQ(r.shocks.size(), 2u);
  EXPECT_NEAR(r.shocks[0].loss_jump, 0.4, 1e-12);
  EXPECT_NEAR(r.shocks[0].held_out_jump, 0.15, 1e-12);
  EXPECT_NEAR(r.shocks[1].loss_jump, 0.1 + 0.1, 1e-12);  // 0.1 after, -0.1 before
  EXPECT_NEAR(r.shocks[1].held_out_jump, 0.05, 1e-12);
  EXPECT_NEAR(r.mean_loss_jump, 0.3, 1e-12);
  EXPECT_NEAR(r.worst_loss_jump, 0.4, 1e-12);
  EXPECT_NEAR(r.mean_held_out_jump, 0.1, 1e-12);
  EXPECT_NEAR(r.worst_held_out_jump, 0.15, 1e-12);
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["redraws"], 2);
  EXPECT_EQ(j["shocks"][1]["step"], 81);
}

TEST(RedrawShock, WindowsCutByTheRunOrASkippedStepGiveNoLossJump) {
  auto steps = flat(50, 2.0);
  steps[20].skipped = true, steps[20].loss = kNaN;  // step 21
  const RedrawShockReport r = analyze_redraw_shocks(steps, {{3, kNaN, kNaN}, {24, 2.0, 2.5}, {49, 2.0, 2.1}}, 5, 0);
  ASSERT_EQ(r.shocks.size(), 3u);
  EXPECT_TRUE(std::isnan(r.shocks[0].loss_jump));  // only 2 steps before
  EXPECT_TRUE(std::isnan(r.shocks[1].loss_jump));  // step 21 is in the window before
  EXPECT_TRUE(std::isnan(r.shocks[2].loss_jump));  // only 2 steps after
  EXPECT_TRUE(std::isnan(r.shocks[0].held_out_jump));  // not measured
  EXPECT_TRUE(std::isnan(r.mean_loss_jump));
  EXPECT_NEAR(r.mean_held_out_jump, 0.3, 1e-12);
  EXPECT_NEAR(r.worst_held_out_jump, 0.5, 1e-12);
  EXPECT_TRUE(r.to_json()["mean_loss_jump"].is_null());
}

TEST(RedrawShock, ARunWithoutRedrawsGetsTheNominalStepsAsAControl) {
  auto steps = flat(100, 3.0);
  for (int s = 26; s <= 30; ++s) steps[s - 1].loss = 3.5;  // a bump that is no redraw's doing
  const RedrawShockReport r = analyze_redraw_shocks(steps, {}, 5, 25);
  EXPECT_TRUE(r.nominal);
  ASSERT_EQ(r.shocks.size(), 3u);  // steps 26, 51, 76: where epochs 1, 2, 3 would start
  EXPECT_EQ(r.shocks[0].step, 26);
  EXPECT_EQ(r.shocks[2].step, 76);
  EXPECT_NEAR(r.shocks[0].loss_jump, 0.5, 1e-12);
  EXPECT_NEAR(r.shocks[1].loss_jump, 0.0, 1e-12);
  EXPECT_TRUE(std::isnan(r.mean_held_out_jump));
  EXPECT_EQ(r.to_json()["redraws"], 0);
  EXPECT_TRUE(analyze_redraw_shocks(steps, {}, 5, 0).shocks.empty());  // no interval: nothing to compare
}

TEST(RunMetricsLines, RedrawAndAttentionStatisticsLinesReadBack) {
  RunMetrics m;
  EXPECT_FALSE(m.add({{"step", 26}, {"redraw", redraw_json(1, 3.25, 3.5, 4096)}}));
  EXPECT_FALSE(m.add({{"step", 51}, {"redraw", redraw_json(2, 0, 0, 0)}}));  // not measured
  nn::AttentionStats softmax{1.5, 4.0, kNaN, kNaN}, performer{2.0, 9.0, 1.2, 2.5};
  nlohmann::json step = {{"step", 30}, {"loss", 3.1}, {"grad_norm", 0.7}};
  step["attention_stats"] = attention_stats_json({softmax, performer});
  EXPECT_TRUE(m.add(nlohmann::json::parse(step.dump())));  // through text, as in the file
  ASSERT_EQ(m.redraws.size(), 2u);
  EXPECT_EQ(m.redraws[0].step, 26);
  EXPECT_DOUBLE_EQ(m.redraws[0].held_out_after - m.redraws[0].held_out_before, 0.25);
  EXPECT_TRUE(std::isnan(m.redraws[1].held_out_before));
  ASSERT_EQ(m.steps.size(), 1u);
  ASSERT_EQ(m.attention.size(), 1u);
  EXPECT_EQ(m.attention[0].step, 30);
  ASSERT_EQ(m.attention[0].layers.size(), 2u);
  EXPECT_DOUBLE_EQ(m.attention[0].layers[0].sq_norm_p99, 4.0);
  EXPECT_TRUE(std::isnan(m.attention[0].layers[0].logit_sd_p50));  // written as null
  EXPECT_DOUBLE_EQ(m.attention[0].layers[1].logit_sd_p99, 2.5);
  EXPECT_TRUE(step["attention_stats"][0]["logit_sd_p50"].is_null());
}

}  // namespace
}  // namespace dark::metrics
