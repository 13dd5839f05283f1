// `darkformer report SWEEP_DIR`: report.md and PNG plots of a sweep, from its summary.json
// (written by `darkformer sweep`) and the points' metrics.jsonl. Each point's stability is
// re-derived from its metrics with the current rules (train/metrics/stability.h), so a report of old
// runs uses today's detector; ReportOptions::stability_overrides tries other settings.
//
// Points group into methods (attention.kind, a *.trainable key or an axis named "method"),
// groups (the other axes but the seed) and seeds (train/experiments/report_data.h). Cells that hold
// several points show mean ± sd over them (seeds), counts of divergence "k/n".
// Tables:
//   detector            the spike rule and settings applied
//   method x lr         when optimizer.lr is an axis: loss spikes, largest spike height,
//                       gradient-norm spikes, diverged, final validation loss, accuracy
//   method x m          when attention.num_features is an axis
//   redraw shocks       when a point redrew its features: mean and worst held-out and loss
//                       jumps per method and group (runs without redraws: the nominal control)
//   attention inputs    when the runs logged them: s = |q~|^2 + |k~|^2 at the end of training
//   loss by distance    when the final evaluations have position buckets: method x bucket (loss,
//                       accuracy), and with evaluation.ablation the window_only and
//                       features_only losses beside the model's, overall and by bucket
//   paired comparisons  with two or more seeds: for each pair of methods in each group, the
//                       mean difference over seeds with a 95% t interval; "not
//                       distinguishable" unless the interval excludes zero
//   passkey, copy       when the points ran the recall tasks: train/experiments/report_recall.h
//   all points          every point with its spikes (height, noise units, recovery), its largest
//                       excursion above the baseline (spike or not: a control's noise floor),
//                       redraw shock, validation and wall time
// Plots: train/experiments/report_plots.h. Without gnuplot the report says so and is written all the same.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace dark::experiments {

struct ReportOptions {
  // Settings of the stability section ("loss_margin=0.3") that replace the points' own.
  std::vector<std::string> stability_overrides;
};

struct ReportResult {
  std::filesystem::path markdown;  // SWEEP_DIR/report.md
  bool plotted = false;            // PNGs were made
  std::string plot_note;           // why not, when they were not
};

ReportResult write_report(const std::filesystem::path& sweep_dir, const ReportOptions& options = {});

}  // namespace dark::experiments
