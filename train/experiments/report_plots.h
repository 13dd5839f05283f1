// The plots of `darkformer report` (gnuplot, pngcairo; data files and .gp scripts in
// SWEEP_DIR/plots/), from the points' metrics:
//   loss_curves.png      training loss against step, one panel per group (the non-method axes
//                        but the seed: a learning rate, say), every method overlaid: an EMA
//                        (bold) over the raw curve (light); loss spikes marked with their height
//                        in nats; redraw steps as ticks on the step axis; a linear loss axis
//                        where the range is small, logarithmic otherwise. With seeds, the first
//                        seed's runs.
//   attention_stats.png  when the runs logged attention statistics: s = |q~|^2 + |k~|^2 against
//                        step (99th percentile solid, median dashed; the largest over layers),
//                        the same panels and colours: what drives the estimators' variance
//   accuracy_vs_m.png    next-token accuracy against m (log2 axis) when m is an axis
//   loss_by_position.png the final validation loss against the position bucket (the context a
//                        prediction had), per group, each method's mean over seeds, with its
//                        exact-window ablations dashed (window_only) and dotted (features_only)
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "train/experiments/report_data.h"

namespace dark::experiments {

// Writes the data files and scripts; returns the scripts' file names (run them in `plots`).
std::vector<std::string> write_plot_scripts(const ReportData& data, const std::filesystem::path& plots);

// Runs each script in `plots` with gnuplot; returns "" or what went wrong.
std::string run_gnuplot(const std::filesystem::path& plots, const std::vector<std::string>& scripts);
bool have_gnuplot();

}  // namespace dark::experiments
