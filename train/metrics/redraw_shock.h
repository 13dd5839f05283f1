// Redraw shocks: every redraw of the random features (Performer's Omega, DARKFormer's G)
// replaces the estimator the model has adapted to; a kernel with lower Monte Carlo variance
// should show a smaller jump. Two measures per redraw at step r (the first step trained with
// the new features):
//   loss jump      mean training loss of steps r .. r+K-1 minus that of steps r-K .. r-1
//                  (K = stability.redraw_window): what training felt, batch noise and the
//                  curve's own trend included;
//   held-out jump  the loss of the same validation batches with the weights fixed, with the new
//                  features minus with the old (the trainer measures it at every redraw,
//                  stability.redraw_eval_batches): what the redraw alone does, free of noise.
// A run that redraws nothing (lfk, softmax, exact mode) gets the loss jump at the steps where
// its attention.redraw_interval would have redrawn: the control that shows what the trend and
// batch noise alone give.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "train/metrics/run_metrics.h"

namespace dark::metrics {

struct RedrawShock {
  std::int64_t step = 0;
  double loss_jump = 0;      // NaN when fewer than K steps lie on either side
  double held_out_jump = 0;  // NaN when not measured (and at nominal steps)
};

struct RedrawShockReport {
  bool nominal = false;  // no redraw happened: the steps are where one would have
  std::vector<RedrawShock> shocks;
  // Over the shocks whose value is finite (NaN when none): the mean, and the worst (largest).
  double mean_loss_jump = 0, worst_loss_jump = 0;
  double mean_held_out_jump = 0, worst_held_out_jump = 0;
  nlohmann::json to_json() const;
};

// `nominal_interval`: the run's attention.redraw_interval, for the control of a run without
// redraws (0 = none: an empty report).
RedrawShockReport analyze_redraw_shocks(const std::vector<StepRecord>& steps, const std::vector<RedrawRecord>& redraws,
                                        int window, std::int64_t nominal_interval);

}  // namespace dark::metrics
