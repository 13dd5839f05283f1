// `darkformer report SWEEP_DIR`: report.md and PNG plots of a sweep, generated from its
// summary.json (written by `darkformer sweep`) and the points' metrics.jsonl.
//
// Tables (each cell from summary data; a cell holding several points shows their mean, or
// "k/n" for divergence):
//   method x learning rate   when optimizer.lr is an axis and attention.kind or a
//                            *.trainable key is (method = kind, "/" trainable): loss spikes,
//                            diverged, final validation loss, next-token accuracy
//   method x num_features    when attention.num_features is an axis: final validation loss,
//                            next-token accuracy
//   all points               always: axis values, status, stability metrics, validation
// Plots (gnuplot, pngcairo; data files and .gp scripts in SWEEP_DIR/plots/):
//   loss_curves.png          training loss against step, one panel per method, one curve per
//                            remaining axis values, loss spikes marked
//   accuracy_vs_m.png        next-token accuracy against m (log2 axis) when m is an axis
// Without gnuplot the report says so and is written all the same.
#pragma once
#include <filesystem>
#include <string>

namespace dark::train {

struct ReportResult {
  std::filesystem::path markdown;  // SWEEP_DIR/report.md
  bool plotted = false;            // PNGs were made
  std::string plot_note;           // why not, when they were not
};

ReportResult write_report(const std::filesystem::path& sweep_dir);

}  // namespace dark::train
