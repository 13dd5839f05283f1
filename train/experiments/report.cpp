// The sweep report: Markdown tables from the points' re-derived stability and metrics, and the
// plots of report_plots.h (see report.h).
#include "train/experiments/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "train/experiments/report_data.h"
#include "train/experiments/report_plots.h"
#include "train/experiments/report_recall.h"
#include "train/metrics/by_position.h"
#include "train/metrics/json_number.h"
#include "train/metrics/paired_stats.h"

namespace dark::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using metrics::kNaN;
const std::string kLr = "optimizer.lr";
const std::string kFeatures = "attention.num_features";

std::string number_text(double v, const char* format = "%.4g") {
  if (!std::isfinite(v)) return "–";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// One number per point (NaN: none), how to print it, and whether cells count ones ("k/n").
struct Metric {
  std::string title;
  std::string short_title;  // in the paired comparisons' rows
  std::function<double(const ReportPoint&)> value;
  const char* format = "%.4g";
  bool count = false;
};

double eval_value(const std::optional<metrics::EvalRecord>& e, double metrics::EvalRecord::*field) { return e ? (*e).*field : kNaN; }
double largest_height(const std::vector<metrics::Spike>& spikes) {
  double h = 0;
  for (const metrics::Spike& s : spikes) h = std::max(h, s.height);
  return h;
}
// Over the last attention-statistics record: the largest layer's value of `field` (or the mean).
double attention_value(const ReportPoint& p, double nn::AttentionStats::*field, bool mean) {
  if (p.metrics.attention.empty() || p.metrics.attention.back().layers.empty()) return kNaN;
  double sum = 0, top = -INFINITY;
  int n = 0;
  for (const nn::AttentionStats& s : p.metrics.attention.back().layers)
    if (std::isfinite(s.*field)) sum += s.*field, top = std::max(top, s.*field), ++n;
  return n == 0 ? kNaN : mean ? sum / n : top;
}

const Metric kSpikes{"Loss spikes", "loss spikes",
                     [](const ReportPoint& p) { return static_cast<double>(p.stability.loss_spikes.size()); }, "%.3g"};
const Metric kSpikeHeight{"Largest loss spike (nats above the level; 0 = none)", "largest loss spike (nats)",
                          [](const ReportPoint& p) { return largest_height(p.stability.loss_spikes); }, "%.3g"};
const Metric kGradSpikes{"Gradient-norm spikes", "gradient-norm spikes",
                         [](const ReportPoint& p) { return static_cast<double>(p.stability.grad_spikes.size()); }, "%.3g"};
const Metric kDiverged{"Diverged", "diverged", [](const ReportPoint& p) { return p.stability.diverged ? 1.0 : 0.0; }, "%.0f", true};
const Metric kFinalLoss{"Final validation loss", "final val loss",
                        [](const ReportPoint& p) { return eval_value(p.stability.final_eval, &metrics::EvalRecord::loss); }};
const Metric kFromStart{"Validation loss change over the run (final − start; finetuning runs, > 0: ended worse than they started)",
                        "val loss change (final − start)",
                        [](const ReportPoint& p) {
                          return eval_value(p.stability.final_eval, &metrics::EvalRecord::loss) -
                                 eval_value(p.stability.start_eval, &metrics::EvalRecord::loss);
                        }};
const Metric kAccuracy{"Next-token accuracy (final)", "final accuracy",
                       [](const ReportPoint& p) { return eval_value(p.stability.final_eval, &metrics::EvalRecord::accuracy); }};
const Metric kHeldOutMean{"Held-out jump at a redraw, mean (nats)", "held-out jump, mean",
                          [](const ReportPoint& p) { return p.stability.redraw.mean_held_out_jump; }, "%.3g"};
const Metric kHeldOutWorst{"Held-out jump at a redraw, worst (nats)", "held-out jump, worst",
                           [](const ReportPoint& p) { return p.stability.redraw.worst_held_out_jump; }, "%.3g"};
const Metric kLossJumpMean{"Training-loss jump at a redraw, mean (nats; nominal steps for runs without redraws)",
                           "loss jump, mean",
                           [](const ReportPoint& p) { return p.stability.redraw.mean_loss_jump; }, "%.3g"};
const Metric kLossJumpWorst{"Training-loss jump at a redraw, worst (nats)", "loss jump, worst",
                            [](const ReportPoint& p) { return p.stability.redraw.worst_loss_jump; }, "%.3g"};
const Metric kSqNormMedian{"Median s = |q~|^2 + |k~|^2 (mean over layers), end of training", "median s",
                           [](const ReportPoint& p) { return attention_value(p, &nn::AttentionStats::sq_norm_p50, true); }, "%.3g"};
const Metric kSqNormTail{"99th percentile of s (largest layer), end of training", "s p99",
                         [](const ReportPoint& p) { return attention_value(p, &nn::AttentionStats::sq_norm_p99, false); }, "%.3g"};
const Metric kLogitSpread{"99th percentile of the feature-logit spread (largest layer), end of training", "logit spread p99",
                          [](const ReportPoint& p) { return attention_value(p, &nn::AttentionStats::logit_sd_p99, false); }, "%.3g"};

// Attention transfer (a point's transfer.json): a number at `path`, NaN where it has none.
double transfer_value(const ReportPoint& p, const json::json_pointer& path) {
  if (!p.transfer.is_object() || !p.transfer.contains(path) || !p.transfer.at(path).is_number()) return kNaN;
  return p.transfer.at(path).get<double>();
}
// A number of every swapped layer's entry (at `path` inside it) averaged over the layers; NaN
// where a layer lacks it (transfer.json of an older build).
double transfer_layer_mean(const ReportPoint& p, const json::json_pointer& path) {
  if (!p.transfer.is_object() || !p.transfer.contains("layers") || !p.transfer.at("layers").is_array()) return kNaN;
  const json& layers = p.transfer.at("layers");
  if (layers.empty()) return kNaN;
  double sum = 0;
  for (const json& layer : layers)
    sum += layer.contains(path) && layer.at(path).is_number() ? layer.at(path).get<double>() : kNaN;
  return sum / static_cast<double>(layers.size());
}
// The swapped layers' median attention-output errors ("error_before" or "error_after"), averaged.
double transfer_layer_error(const ReportPoint& p, const char* when) {
  return transfer_layer_mean(p, json::json_pointer(std::string("/") + when + "/median"));
}

const Metric kAtSwap{"Validation loss at the swap (before any transfer or training)", "val loss at swap",
                     [](const ReportPoint& p) {
                       return p.transfer.is_object() ? transfer_value(p, json::json_pointer("/validation_at_swap/loss"))
                                                     : eval_value(p.stability.start_eval, &metrics::EvalRecord::loss);
                     }};
const Metric kAfterTransfer{"Validation loss at step 0 (after the transfer, where there is one)", "val loss after transfer",
                            [](const ReportPoint& p) { return eval_value(p.stability.start_eval, &metrics::EvalRecord::loss); }};
const Metric kErrorBefore{"Attention-output error before the transfer (median over positions and heads, mean over the swapped layers)",
                          "error before transfer", [](const ReportPoint& p) { return transfer_layer_error(p, "error_before"); },
                          "%.3g"};
const Metric kErrorAfter{"Attention-output error after the transfer (median over positions and heads, mean over the swapped layers)",
                         "error after transfer", [](const ReportPoint& p) { return transfer_layer_error(p, "error_after"); },
                         "%.3g"};
const Metric kKlBefore{"Attention-weight divergence before the transfer (KL of the exact weights against the kernel's, nats, "
                       "mean over the swapped layers)",
                       "attention KL before", [](const ReportPoint& p) {
                         return transfer_layer_mean(p, json::json_pointer("/before/attention_kl"));
                       }, "%.3g"};
const Metric kKlAfter{"Attention-weight divergence after the transfer (nats, mean over the swapped layers)", "attention KL after",
                      [](const ReportPoint& p) { return transfer_layer_mean(p, json::json_pointer("/after/attention_kl")); },
                      "%.3g"};
const Metric kCollapsed{"Swapped layers collapsed by the transfer (output norm under a quarter of the exact attention's)",
                        "collapsed layers",
                        [](const ReportPoint& p) { return transfer_value(p, json::json_pointer("/collapsed_layers")); }, "%.3g"};
const Metric kTransferSeconds{"Transfer time (s; the evaluation at the swap and the error measurements included)", "transfer s",
                              [](const ReportPoint& p) { return transfer_value(p, json::json_pointer("/seconds")); }, "%.3g"};
const Metric kTransferPeak{"Peak resident set at the end of the transfer (MiB; the model's loading included)", "transfer peak MiB",
                           [](const ReportPoint& p) { return transfer_value(p, json::json_pointer("/peak_resident_mib")); }, "%.4g"};

// "3.21", "3.21 ± 0.04" over the cell's points, "k/n" for counts.
std::string cell(const std::vector<const ReportPoint*>& points, const Metric& m) {
  if (points.empty()) return " ";
  std::vector<double> values;
  for (const ReportPoint* p : points) values.push_back(m.value(*p));
  const metrics::Replicates r = metrics::summarize(values);
  if (m.count) return str(static_cast<int>(std::lround(r.n ? r.mean * r.n : 0)), "/", points.size());
  if (r.n == 0) return "–";
  if (r.n == 1 || r.sd == 0) return number_text(r.mean, m.format);  // one point, or the same value for every seed
  return number_text(r.mean, m.format) + " ± " + number_text(r.sd, "%.2g");
}

// A Markdown table, one row per method, one column per `column_of` value (grid order).
std::string method_table(const ReportData& d, const std::string& corner,
                         const std::function<std::string(const ReportPoint&)>& column_of, const Metric& m) {
  std::vector<std::string> columns;
  for (const ReportPoint& p : d.points)
    if (std::find(columns.begin(), columns.end(), column_of(p)) == columns.end()) columns.push_back(column_of(p));
  std::string out = str("**", m.title, "**\n\n| ", corner, " |");
  for (const std::string& c : columns) out += " " + (c.empty() ? std::string("all") : c) + " |";
  out += "\n|---|";
  for (std::size_t i = 0; i < columns.size(); ++i) out += "---|";
  out += "\n";
  for (const std::string& method : d.methods) {
    out += "| " + method + " |";
    for (const std::string& c : columns) {
      std::vector<const ReportPoint*> in_cell;
      for (const ReportPoint& p : d.points)
        if (p.method == method && column_of(p) == c) in_cell.push_back(&p);
      out += str(" ", cell(in_cell, m), " |");
    }
    out += "\n";
  }
  return out + "\n";
}

std::string method_title(const ReportData& d) {
  return d.method_axes.size() == 1 ? axis_leaf(d.method_axes[0]) : "method";
}

// ---- loss by distance (train/metrics/by_position.h) and the exact-window ablations ----

// The final evaluation's numbers of one position bucket (ablation "" = the model itself),
// NaN where the point has none.
double final_bucket_value(const ReportPoint& p, const std::string& ablation, const std::string& bucket,
                          double metrics::BucketMetrics::*field) {
  const auto& e = p.stability.final_eval;
  if (!e) return kNaN;
  const metrics::ByPosition* buckets = &e->by_position;
  if (!ablation.empty()) {
    const auto a = std::find_if(e->ablations.begin(), e->ablations.end(),
                                [&](const metrics::AblationRecord& r) { return r.name == ablation; });
    if (a == e->ablations.end()) return kNaN;
    buckets = &a->by_position;
  }
  const auto b = std::find_if(buckets->begin(), buckets->end(), [&](const metrics::BucketMetrics& m) { return m.bucket == bucket; });
  return b == buckets->end() ? kNaN : (*b).*field;
}
double final_ablation_loss(const ReportPoint& p, const std::string& ablation) {
  const auto& e = p.stability.final_eval;
  if (!e) return kNaN;
  for (const metrics::AblationRecord& a : e->ablations)
    if (a.name == ablation) return a.loss;
  return kNaN;
}

// The buckets and ablations some point's final evaluation has, in table order.
std::vector<std::string> final_buckets(const ReportData& d) {
  std::vector<std::string> out;
  for (const metrics::PositionBucket& b : metrics::position_buckets())
    for (const ReportPoint& p : d.points)
      if (std::isfinite(final_bucket_value(p, "", b.name, &metrics::BucketMetrics::loss))) {
        out.push_back(b.name);
        break;
      }
  return out;
}
std::vector<std::string> final_ablations(const ReportData& d) {
  std::vector<std::string> out;
  for (const char* name : {"window_only", "features_only"})
    for (const ReportPoint& p : d.points)
      if (std::isfinite(final_ablation_loss(p, name))) {
        out.push_back(name);
        break;
      }
  return out;
}

// The section's metrics: a bucket's loss; an ablation's loss, and its change over the model's.
Metric bucket_loss_metric(const std::string& bucket) {
  return {"Validation loss at context " + bucket, "val loss " + bucket,
          [bucket](const ReportPoint& p) { return final_bucket_value(p, "", bucket, &metrics::BucketMetrics::loss); }};
}
Metric ablation_loss_metric(const std::string& ablation) {
  return {"Final validation loss, " + ablation, "val loss " + ablation,
          [ablation](const ReportPoint& p) { return final_ablation_loss(p, ablation); }};
}
Metric ablation_change_metric(const std::string& ablation) {
  return {str("Loss change without the ", ablation == "window_only" ? "far field" : "window", " (", ablation, " − model)"),
          ablation + " − model", [ablation](const ReportPoint& p) {
            return final_ablation_loss(p, ablation) - eval_value(p.stability.final_eval, &metrics::EvalRecord::loss);
          }};
}
// All of them, for the paired comparisons by seed.
std::vector<Metric> by_position_metrics(const ReportData& d) {
  std::vector<Metric> out;
  for (const std::string& b : final_buckets(d)) out.push_back(bucket_loss_metric(b));
  for (const std::string& a : final_ablations(d)) {
    out.push_back(ablation_loss_metric(a));
    out.push_back(ablation_change_metric(a));
  }
  return out;
}

// One table per group: a row per method, a column per bucket, the final evaluation's `field`
// (of the model, or of an ablation).
std::string bucket_table(const ReportData& d, const std::string& title, const std::string& ablation,
                         double metrics::BucketMetrics::*field) {
  const std::vector<std::string> buckets = final_buckets(d);
  std::string out;
  for (const std::string& group : d.groups) {
    out += str("**", title, group.empty() ? std::string() : ", " + group, "**\n\n| ", method_title(d), " \\ context |");
    for (const std::string& b : buckets) out += " " + b + " |";
    out += "\n|---|";
    for (std::size_t i = 0; i < buckets.size(); ++i) out += "---|";
    out += "\n";
    for (const std::string& method : d.methods) {
      std::vector<const ReportPoint*> points;
      for (const ReportPoint& p : d.points)
        if (p.method == method && p.group == group) points.push_back(&p);
      if (points.empty()) continue;
      out += "| " + method + " |";
      for (const std::string& b : buckets) {
        const Metric m{title, b, [&](const ReportPoint& p) { return final_bucket_value(p, ablation, b, field); }};
        out += str(" ", cell(points, m), " |");
      }
      out += "\n";
    }
    out += "\n";
  }
  return out;
}

// "Loss by distance": the final evaluation by position bucket, and the ablations beside the
// model's loss where the runs measured them (evaluation.ablation). "" without buckets.
std::string by_position_section(const ReportData& d, const std::string& spread) {
  if (final_buckets(d).empty()) return "";
  std::string md = "## Loss by distance" + spread + "\n\n"
                   "The final evaluation by position bucket: a token at 0-based input position t is predicted from t + 1 "
                   "tokens of context, and the columns are ranges of that context length (docs/long-context.md, \"Loss by "
                   "distance and ablations\"). With an exact window of W keys, the buckets past W are where the random "
                   "features carry the far keys. Their curves: loss_by_position among the plots below.\n\n";
  md += bucket_table(d, "Validation loss by context length", "", &metrics::BucketMetrics::loss);
  md += bucket_table(d, "Next-token accuracy by context length", "", &metrics::BucketMetrics::accuracy);
  const std::vector<std::string> ablations = final_ablations(d);
  if (ablations.empty()) return md;
  md += "### What each part of the exact window carries\n\n"
        "The same final evaluation with one part of the exact-window layers switched off (`evaluation.ablation`): "
        "**window_only**, the far keys get no weight (sliding-window attention over the W nearest keys with the kind's "
        "exact kernel), and **features_only**, no window (the kind's random features over every key). A large "
        "window_only − model means the features carry the far field; a window_only loss equal to the model's means "
        "the window alone does the work.\n\n";
  const auto group_of = [](const ReportPoint& p) { return p.group; };
  md += method_table(d, method_title(d), group_of, kFinalLoss);
  for (const std::string& a : ablations) md += method_table(d, method_title(d), group_of, ablation_loss_metric(a));
  for (const std::string& a : ablations) md += method_table(d, method_title(d), group_of, ablation_change_metric(a));
  for (const std::string& a : ablations)
    md += bucket_table(d, "Validation loss by context length, " + a, a, &metrics::BucketMetrics::loss);
  return md;
}

std::string detector_text(const metrics::StabilityConfig& c) {
  if (c.rule == metrics::SpikeRule::ratio)
    return str("Spikes by the ratio rule (`stability.rule` ratio): a step whose training loss exceeds ", number_text(c.loss_factor),
               " x the median of the previous ", c.window, " steps (gradient norm: ", number_text(c.grad_factor),
               " x); each such step counts.");
  return str("Spikes by the robust rule (`stability.rule` robust): a loss spike starts at a step whose training loss "
             "exceeds the running level (the median of the previous ",
             std::max(1, c.window / 5), " steps) by more than ", number_text(c.loss_sigmas),
             " noise standard deviations (1.4826 x the MAD of the step-to-step differences over the previous ", c.window,
             " steps, / sqrt 2) and by more than ", number_text(c.loss_margin),
             " nats; it counts once however many steps it lasts, with its height (nats above the level, and in noise "
             "units) and its recovery (steps until the loss is back within level + ",
             number_text(c.loss_sigmas), " sd). Gradient-norm spikes: the same on log norms with ", number_text(c.grad_sigmas),
             " sd and a factor ", number_text(c.grad_margin), " over the level.");
}

// Paired comparisons by seed: every pair of methods in every group, each metric.
std::string paired_section(const ReportData& d, const std::vector<const Metric*>& metrics) {
  std::string rows;
  int identical = 0;
  for (const std::string& group : d.groups)
    for (std::size_t i = 0; i < d.methods.size(); ++i)
      for (std::size_t j = i + 1; j < d.methods.size(); ++j)
        for (const Metric* m : metrics) {
          std::vector<double> a, b;
          for (const std::int64_t seed : d.seeds) {
            const ReportPoint *pa = nullptr, *pb = nullptr;
            for (const ReportPoint& p : d.points) {
              if (p.group != group || !p.seed || *p.seed != seed) continue;
              if (p.method == d.methods[i]) pa = &p;
              if (p.method == d.methods[j]) pb = &p;
            }
            if (pa && pb) a.push_back(m->value(*pa)), b.push_back(m->value(*pb));
          }
          const metrics::PairedDifference diff = metrics::paired_difference(a, b);
          if (diff.n < 2) continue;
          if (diff.mean == 0 && diff.sd == 0) {
            ++identical;  // equal for every seed (no spikes on either side, say)
            continue;
          }
          const std::string verdict = !diff.distinguishable() ? "not distinguishable"
                                      : diff.mean < 0            ? d.methods[i] + " lower"
                                                                 : d.methods[i] + " higher";
          rows += str("| ", group.empty() ? "all" : group, " | ", m->short_title, " | ", d.methods[i], " − ", d.methods[j], " | ",
                      number_text(diff.mean, "%+.3g"), " | [", number_text(diff.low, "%+.3g"), ", ",
                      number_text(diff.high, "%+.3g"), "] | ", diff.n, " | ", verdict, " |\n");
        }
  if (rows.empty()) return "";
  std::string out = str("## Paired comparisons by seed\n\n",
                        "Same seed = same data order, initial weights and feature draws. For each pair of methods in each group: "
                        "the mean over seeds of the difference (first minus second) with its 95% Student t interval. A "
                        "difference is called one only when the interval excludes zero.",
                        identical ? str(" ", identical, " comparison(s) where both methods gave the same value for every "
                                        "seed (no spikes on either side, say) are left out.")
                                  : std::string(),
                        "\n\n| group | metric | pair | mean difference | 95% interval | seeds | verdict |\n"
                        "|---|---|---|---|---|---|---|\n");
  return out + rows + "\n";
}

std::string spike_text(const std::optional<metrics::Spike>& s) {
  if (!s) return "–";
  std::string text = str(number_text(s->height, "%.3g"), " @ ", s->step);
  if (std::isfinite(s->noise_units)) text += str(" (", number_text(s->noise_units, "%.3g"), " sd");
  else text += " (";
  text += s->recovery_steps ? str(", back in ", *s->recovery_steps, ")") : std::string(std::isfinite(s->noise_units) ? ", no recovery)" : "no recovery)");
  return text;
}

std::string all_points_table(const ReportData& d) {
  const bool has_start = std::any_of(d.points.begin(), d.points.end(), [](const ReportPoint& p) { return p.stability.start_eval.has_value(); });
  const bool has_redraw = std::any_of(d.points.begin(), d.points.end(), [](const ReportPoint& p) { return !p.stability.redraw.shocks.empty(); });
  std::string out = "| point |";
  for (const std::string& a : d.axes) out += " " + axis_leaf(a) + " |";
  if (has_start) out += " start val loss | start accuracy |";
  out += " status | loss spikes | largest spike (nats @ step) | largest excursion (sd / nats) | grad spikes | largest grad "
         "excursion (sd / x) | diverged at |";
  if (has_redraw) out += " redraws | held-out jump mean / worst | loss jump mean |";
  out += " final val loss | best val loss | perplexity | accuracy | wall |\n|---|";
  const std::size_t columns = d.axes.size() + (has_start ? 2 : 0) + 7 + (has_redraw ? 3 : 0) + 5;
  for (std::size_t i = 0; i < columns; ++i) out += "---|";
  out += "\n";
  for (const ReportPoint& p : d.points) {
    const metrics::StabilityReport& s = p.stability;
    out += "| " + p.name() + " |";
    for (const std::string& a : d.axes) out += str(" ", axis_value_text(p.row["values"][a]), " |");
    if (has_start)
      out += str(" ", number_text(eval_value(s.start_eval, &metrics::EvalRecord::loss)), " | ",
                 number_text(eval_value(s.start_eval, &metrics::EvalRecord::accuracy)), " |");
    out += str(" ", p.row.value("status", "?"), " | ", s.loss_spikes.size(), " | ", spike_text(s.largest_loss_spike), " | ",
               number_text(s.loss_excursion.noise_units, "%.3g"), " / ", number_text(s.loss_excursion.height, "%.3g"), " | ",
               s.grad_spikes.size(), " | ", number_text(s.grad_excursion.noise_units, "%.3g"), " / ",
               number_text(std::exp(s.grad_excursion.height), "%.3g"), " | ",
               s.diverged ? std::to_string(s.divergence_step) : std::string("–"), " |");
    if (has_redraw)
      out += str(" ", s.redraw.nominal ? std::string("none (nominal ") + std::to_string(s.redraw.shocks.size()) + ")"
                                       : std::to_string(s.redraw.shocks.size()),
                 " | ", number_text(s.redraw.mean_held_out_jump, "%.3g"), " / ", number_text(s.redraw.worst_held_out_jump, "%.3g"),
                 " | ", number_text(s.redraw.mean_loss_jump, "%.3g"), " |");
    const json& wall = p.row["wall_s"];
    out += str(" ", number_text(eval_value(s.final_eval, &metrics::EvalRecord::loss)), " | ",
               number_text(eval_value(s.best_eval, &metrics::EvalRecord::loss)), " | ",
               number_text(eval_value(s.final_eval, &metrics::EvalRecord::perplexity)), " | ",
               number_text(eval_value(s.final_eval, &metrics::EvalRecord::accuracy)), " | ",
               wall.is_number() ? number_text(wall.get<double>(), "%.0f") + " s" : "–", " |\n");
  }
  return out + "\n";
}

}  // namespace

ReportResult write_report(const fs::path& sweep_dir, const ReportOptions& options) {
  const ReportData d = load_report_data(sweep_dir, options.stability_overrides);
  const auto has_axis = [&](const std::string& a) { return std::find(d.axes.begin(), d.axes.end(), a) != d.axes.end(); };
  const auto group_of = [](const ReportPoint& p) { return p.group; };
  int done = 0, diverged = 0;
  for (const ReportPoint& p : d.points) done += p.row["status"] == "done", diverged += p.row["status"] == "diverged";
  const bool finetuning = std::any_of(d.points.begin(), d.points.end(), [](const ReportPoint& p) { return p.stability.start_eval.has_value(); });
  const std::string spread = d.seeded() ? str(" (mean ± sd over ", d.seeds.size(), " seeds)") : std::string();

  std::string md = str("# Sweep report: ", sweep_dir.filename().string(), "\n\n",
                       "Generated by `darkformer report` from `summary.json` (sweep file `", d.summary.value("sweep_file", "?"),
                       "`) and each point's `metrics.jsonl`: ", d.points.size(), " points, ", done, " done, ", diverged,
                       " diverged, ", d.points.size() - done - diverged, " failed or not run",
                       d.seeded() ? str("; seeds ", d.seeds.size()) : std::string(), ".\n\n", detector_text(d.detector),
                       options.stability_overrides.empty() ? "" : " (settings given to the report, not the runs' own)",
                       " A run diverged at its first skipped or non-finite step, or when, after warm-up, the median loss of "
                       "`stability.window` / 5 consecutive steps rose above its initial loss. Accuracy is next-token top-1 on "
                       "the validation windows at the end of the run. Cells that hold several points show their mean, ± their "
                       "standard deviation when there are several (divergence: diverged/points).\n\n");
  if (!d.method_axes.empty() && has_axis(kLr)) {
    md += "## Method x learning rate" + spread + "\n\n";
    const auto lr_of = [](const ReportPoint& p) { return axis_value_text(p.row["values"][kLr]); };
    for (const Metric* m : {&kSpikes, &kSpikeHeight, &kGradSpikes, &kDiverged, &kFinalLoss, &kAccuracy})
      md += method_table(d, method_title(d) + " \\ lr", lr_of, *m);
    if (finetuning) md += method_table(d, method_title(d) + " \\ lr", lr_of, kFromStart);
  }
  if (has_axis(kFeatures)) {
    md += "## Method x number of random features (m)" + spread + "\n\n";
    const auto m_of = [](const ReportPoint& p) { return axis_value_text(p.row["values"][kFeatures]); };
    for (const Metric* m : {&kFinalLoss, &kAccuracy, &kSpikes}) md += method_table(d, method_title(d) + " \\ num_features", m_of, *m);
  }
  if (!has_axis(kLr) && !has_axis(kFeatures) && d.methods.size() > 1) {
    md += "## Methods" + spread + "\n\n";
    for (const Metric* m : {&kFinalLoss, &kAccuracy, &kSpikes, &kSpikeHeight, &kGradSpikes, &kDiverged})
      md += method_table(d, method_title(d), group_of, *m);
    if (finetuning) md += method_table(d, method_title(d), group_of, kFromStart);
  }
  const bool transfers = std::any_of(d.points.begin(), d.points.end(), [](const ReportPoint& p) { return p.transfer.is_object(); });
  if (transfers) {
    md += "## Attention transfer" + spread + "\n\n"
          "From each run's `transfer.json` (`finetune.transfer`; docs/method.md, \"Attention transfer\"): the validation "
          "loss of the swapped model before the transfer, at step 0 (after it) and at the end of the run, on the same "
          "validation windows; each swapped layer's attention-output error |out - exact| / |exact| (the probe's measure) "
          "and the divergence of its attention weights from the exact ones, before and after, on held-out batches and the "
          "held-out feature draw; the layers that went silent. Points without a transfer show their step-0 loss as the "
          "loss at the swap.\n\n";
    for (const Metric* m : {&kAtSwap, &kAfterTransfer, &kFinalLoss, &kErrorBefore, &kErrorAfter, &kKlBefore, &kKlAfter,
                            &kCollapsed, &kTransferSeconds, &kTransferPeak})
      md += method_table(d, method_title(d), group_of, *m);
  }
  const bool redraws = std::any_of(d.points.begin(), d.points.end(), [](const ReportPoint& p) { return !p.stability.redraw.nominal && !p.stability.redraw.shocks.empty(); });
  if (redraws) {
    md += "## Redraw shocks" + spread + "\n\n"
          "At each redraw of the random features (the step that first trains with them): the **held-out jump**, the loss "
          "of the same validation batches with the weights fixed, with the new features minus with the old "
          "(`stability.redraw_eval_batches`), and the **training-loss jump**, the mean loss of the `stability.redraw_window` "
          "steps from the redraw minus that of as many steps before. Runs that redraw nothing (lfk, softmax) get the "
          "training-loss jump at the steps where their `attention.redraw_interval` would have redrawn: the control for "
          "the curve's own trend and batch noise.\n\n";
    for (const Metric* m : {&kHeldOutMean, &kHeldOutWorst, &kLossJumpMean, &kLossJumpWorst})
      md += method_table(d, method_title(d), group_of, *m);
  }
  if (std::any_of(d.points.begin(), d.points.end(), [](const ReportPoint& p) { return !p.metrics.attention.empty(); })) {
    md += "## What drives the estimators' variance" + spread + "\n\n"
          "s = |q~|^2 + |k~|^2 of the attention inputs (after the d^(-1/4) scale and DARKFormer's M) over the positions and "
          "heads of a training batch; one random feature's relative variance for a pair of such vectors is about "
          "exp(s) - 1. The logit spread is the standard deviation of a query's or key's m feature logits. Curves over "
          "training in `plots/attention_stats.png`.\n\n";
    for (const Metric* m : {&kSqNormMedian, &kSqNormTail, &kLogitSpread}) md += method_table(d, method_title(d), group_of, *m);
  }
  md += by_position_section(d, spread);
  const std::vector<Metric> by_position = by_position_metrics(d);
  if (d.seeded()) {
    std::vector<const Metric*> paired = {&kFinalLoss, &kAccuracy, &kSpikes, &kSpikeHeight, &kGradSpikes};
    for (const Metric& m : by_position) paired.push_back(&m);
    if (finetuning) paired.push_back(&kFromStart);
    if (transfers) paired.insert(paired.end(), {&kAtSwap, &kAfterTransfer, &kErrorAfter});
    if (redraws) paired.insert(paired.end(), {&kHeldOutMean, &kHeldOutWorst, &kLossJumpMean});
    md += paired_section(d, paired);
  }
  md += recall_sections(d);  // passkey and copy tables, when the points ran them (report_recall.h)
  md += "## All points\n\n" + all_points_table(d);

  ReportResult result;
  const fs::path plots = sweep_dir / "plots";
  fs::create_directories(plots);
  const std::vector<std::string> scripts = write_plot_scripts(d, plots);
  md += "## Plots\n\n";
  if (scripts.empty()) {
    result.plot_note = "no point has training metrics to plot";
  } else if (!have_gnuplot()) {
    result.plot_note = str("gnuplot is not installed (Debian package gnuplot-nox): the data and scripts are in ",
                           plots.string(), "; run `gnuplot SCRIPT.gp` there once it is");
  } else {
    result.plot_note = run_gnuplot(plots, scripts);
    result.plotted = result.plot_note.empty();
  }
  if (result.plotted) {
    for (const std::string& s : scripts) {
      const std::string png = s.substr(0, s.size() - 3) + ".png";
      md += str("![", png, "](plots/", png, ")\n\n");
    }
  } else {
    md += "No plots: " + result.plot_note + ".\n";
  }
  result.markdown = sweep_dir / "report.md";
  write_file_atomic(result.markdown, md);
  return result;
}

}  // namespace dark::experiments
