// Report plots (see report_plots.h).
#include "train/experiments/report_plots.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "core/error.h"
#include "core/file_io.h"
#include "train/experiments/child_process.h"
#include "train/metrics/by_position.h"

namespace dark::experiments {
namespace fs = std::filesystem;

namespace {

// One colour per method, in method order.
const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
std::string colour(std::size_t method) { return kColours[method % std::size(kColours)]; }
// The same colour, mostly transparent, for raw curves under their smoothed ones.
std::string light(std::size_t method) { return "#B0" + colour(method).substr(1); }

std::string gp_string(const std::string& s) {  // a single-quoted gnuplot string
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string safe(const std::string& s) {  // a file-name part
  std::string out;
  for (const char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_';
  return out;
}

std::size_t index_of(const std::vector<std::string>& list, const std::string& v) {
  return static_cast<std::size_t>(std::find(list.begin(), list.end(), v) - list.begin());
}

// The points shown in curves: one per (group, method), the first seed's.
std::vector<const ReportPoint*> shown_points(const ReportData& d, const std::string& group) {
  std::vector<const ReportPoint*> out;
  for (const std::string& method : d.methods)
    for (const ReportPoint& p : d.points)
      if (p.group == group && p.method == method && (!p.seed || d.seeds.empty() || *p.seed == d.seeds.front())) {
        out.push_back(&p);
        break;
      }
  return out;
}

std::string multiplot_header(const std::string& output, std::size_t panels, const std::string& title) {
  const std::size_t columns = std::min<std::size_t>(panels, 3), rows = (panels + columns - 1) / columns;
  return str("set terminal pngcairo noenhanced size ", 560 * columns, ",", 420 * rows, "\n", "set output ", gp_string(output),
             "\nset grid\nset key below horizontal\nset multiplot layout ", rows, ",", columns, " title ", gp_string(title), "\n");
}

std::string panel_title(const ReportData& d, const std::string& group) {
  return group.empty() ? (d.seeds.empty() ? std::string("all points") : str("seed ", d.seeds.front())) : group;
}

// Loss curves: returns the script, or "" when no point has steps.
std::string loss_script(const ReportData& d, const fs::path& plots) {
  std::string gp;
  std::size_t panels = 0;
  for (const std::string& group : d.groups) {
    std::string plot, arrows;
    double lo = INFINITY, hi = 0;
    std::int64_t last_step = 0;  // the x range ends at the last step plotted or marked
    std::map<std::int64_t, bool> redraw_steps;
    for (const ReportPoint* p : shown_points(d, group)) {
      const std::size_t m = index_of(d.methods, p->method);
      std::vector<std::pair<std::int64_t, double>> curve;
      for (const metrics::StepRecord& s : p->metrics.steps)
        if (!s.skipped && s.loss > 0 && std::isfinite(s.loss)) curve.emplace_back(s.step, s.loss);
      if (curve.empty()) continue;
      // EMA over about 1/30 of the run (at least 5 steps): smooth enough to read, short enough
      // that a spike still shows. Labels of spikes at the same step stack by method.
      const double span = std::max(5.0, static_cast<double>(curve.size()) / 30.0), alpha = 2.0 / (span + 1.0);
      std::string dat;
      double ema = curve.front().second;
      for (std::size_t i = 0; i < curve.size(); ++i) {
        const auto [step, loss] = curve[i];
        ema = alpha * loss + (1 - alpha) * ema;
        dat += str(step, " ", loss, " ", ema, "\n");
        lo = std::min(lo, loss);
        hi = std::max(hi, ema);
        last_step = std::max(last_step, step);
      }
      // The range shows where the run started (a finetuning run's start is the swap's cost; a
      // run from scratch starts at ln(vocabulary), and the wide range then turns the axis
      // logarithmic) and every spike's peak.
      hi = std::max(hi, curve.front().second);
      for (const metrics::Spike& s : p->stability.loss_spikes) hi = std::max(hi, s.value);
      const std::string base = safe(p->name());
      write_file_atomic(plots / (base + ".loss.dat"), dat);
      plot += str(plot.empty() ? "plot " : ", \\\n     ", gp_string(base + ".loss.dat"), " using 1:2 with lines lw 1 lc rgb ",
                  gp_string(light(m)), " notitle, \\\n     ", gp_string(base + ".loss.dat"), " using 1:3 with lines lw 2 lc rgb ",
                  gp_string(colour(m)), " title ", gp_string(p->method));
      std::string spikes;
      for (const metrics::Spike& s : p->stability.loss_spikes) spikes += str(s.step, " ", s.value, " ", s.height, "\n");
      if (!spikes.empty()) {
        write_file_atomic(plots / (base + ".spikes.dat"), spikes);
        plot += str(", \\\n     ", gp_string(base + ".spikes.dat"), " using 1:2 with points pt 7 ps 1.1 lc rgb ",
                    gp_string(colour(m)), " notitle, \\\n     ", gp_string(base + ".spikes.dat"),
                    " using 1:2:(sprintf('+%.2f', $3)) with labels offset 0,", 0.9 + 0.9 * static_cast<double>(m),
                    " font ',8' tc rgb ", gp_string(colour(m)),
                    " notitle");
      }
      for (const metrics::RedrawRecord& r : p->metrics.redraws) redraw_steps[r.step] = true;
      // Where the run diverged (the sweep's verdict): a dashed line in its colour, labelled.
      if (p->stability.diverged) {
        const std::int64_t at = p->stability.divergence_step;
        last_step = std::max(last_step, at + 1);  // a divergence at a skipped step lies past the curve
        arrows += str("set arrow from first ", at, ", graph 0 to first ", at, ", graph 1 nohead dt 2 lw 2 lc rgb ",
                      gp_string(colour(m)), "\nset label ", gp_string("diverged (" + p->method + ")"), " at first ", at,
                      ", graph ", 0.95 - 0.06 * static_cast<double>(m), " right offset -0.5,0 font ',8' tc rgb ",
                      gp_string(colour(m)), "\n");
      }
    }
    if (plot.empty()) continue;
    for (const auto& [step, unused] : redraw_steps)
      arrows += str("set arrow from first ", step, ", graph 0 to first ", step, ", graph 0.04 nohead lc rgb '#555555'\n");
    ++panels;
    // Linear where the range is small (a finetuning run, a stalled one), log where it is not
    // (a blow-up to several times the loss).
    gp += str(hi / lo > 2.0 ? "set logscale y\n" : "unset logscale y\n", "set yrange [", lo * 0.98, ":", hi * 1.05, "]\n",
              "set xrange [*:", last_step, "]\n",
              "set title ",
              gp_string(panel_title(d, group) + (redraw_steps.empty() ? "" : " (ticks: redraws)")), "\n", arrows, plot,
              "\nunset arrow\nunset label\n");
  }
  if (!panels) return "";
  return str("# Training loss per group (panels), every method overlaid: EMA bold over the raw curve; dots: loss spikes\n",
             "# with their height in nats; ticks on the step axis: random-feature redraws; a dashed line: where a run\n",
             "# diverged. Legends sit below the panels, off the curves.\n",
             multiplot_header("loss_curves.png", panels,
                              "Training loss (EMA over raw; dots: spikes, +height in nats)" +
                                  std::string(d.seeds.size() > 1 ? str(", seed ", d.seeds.front()) : "")),
             "set xlabel 'step'\nset ylabel 'training loss'\n", gp, "unset multiplot\n");
}

// Attention statistics: returns the script, or "" when no point logged any.
std::string attention_script(const ReportData& d, const fs::path& plots) {
  std::string gp;
  std::size_t panels = 0;
  for (const std::string& group : d.groups) {
    std::string plot;
    for (const ReportPoint* p : shown_points(d, group)) {
      std::string dat;
      for (const metrics::AttentionStatsRecord& a : p->metrics.attention) {
        double p99 = 0, p50 = 0;
        for (const nn::AttentionStats& s : a.layers) p99 = std::max(p99, s.sq_norm_p99), p50 = std::max(p50, s.sq_norm_p50);
        if (p99 > 0) dat += str(a.step, " ", p99, " ", p50, "\n");
      }
      if (dat.empty()) continue;
      const std::size_t m = index_of(d.methods, p->method);
      const std::string file = safe(p->name()) + ".attention.dat";
      write_file_atomic(plots / file, dat);
      plot += str(plot.empty() ? "plot " : ", \\\n     ", gp_string(file), " using 1:2 with lines lw 2 lc rgb ",
                  gp_string(colour(m)), " title ", gp_string(p->method), ", \\\n     ", gp_string(file),
                  " using 1:3 with lines lw 1 dt 2 lc rgb ", gp_string(colour(m)), " notitle");
    }
    if (plot.empty()) continue;
    ++panels;
    gp += str("set title ", gp_string(panel_title(d, group)), "\n", plot, "\n");
  }
  if (!panels) return "";
  return str("# |q~|^2 + |k~|^2 of the attention inputs (after the d^-1/4 scale and DARKFormer's M): 99th percentile\n",
             "# (solid) and median (dashed) over positions and heads, the largest over layers. A feature's relative\n",
             "# variance for such a pair is about exp(s) - 1.\n",
             multiplot_header("attention_stats.png", panels, "|q~|^2 + |k~|^2 (p99 solid, median dashed; largest layer)"),
             "set logscale y\nset xlabel 'step'\nset ylabel 's = |q~|^2 + |k~|^2'\n", gp, "unset multiplot\n");
}

// Accuracy against m per (method, group): returns the script, or "" when m is no axis.
std::string accuracy_script(const ReportData& d, const fs::path& plots) {
  const std::string m_axis = "attention.num_features";
  if (std::find(d.axes.begin(), d.axes.end(), m_axis) == d.axes.end()) return "";
  std::map<std::string, std::map<double, std::vector<double>>> series;  // curve -> m -> accuracies over seeds
  std::vector<std::string> order;
  for (const ReportPoint& p : d.points) {
    const auto& e = p.stability.final_eval;
    if (!e) continue;
    std::string group;  // the group without m
    for (const std::string& a : d.group_axes)
      if (a != m_axis) group += str(group.empty() ? "" : ", ", a.substr(a.rfind('.') + 1), "=", axis_value_text(p.row["values"][a]));
    const std::string curve = p.method + (group.empty() ? "" : " " + group);
    if (std::find(order.begin(), order.end(), curve) == order.end()) order.push_back(curve);
    series[curve][p.row["values"][m_axis].get<double>()].push_back(e->accuracy);
  }
  std::string plot;
  int index = 0;
  for (const std::string& curve : order) {
    std::string dat;
    for (const auto& [m, accuracies] : series[curve]) {
      double sum = 0;
      for (const double a : accuracies) sum += a;
      dat += str(m, " ", sum / static_cast<double>(accuracies.size()), "\n");
    }
    const std::string file = str("accuracy_m_", ++index, ".dat");
    write_file_atomic(plots / file, dat);
    plot += str(plot.empty() ? "plot " : ", \\\n     ", gp_string(file), " using 1:2 with linespoints pt 7 title ", gp_string(curve));
  }
  if (plot.empty()) return "";
  return str("# Final next-token accuracy against the number of random features m (mean over seeds).\n",
             "set terminal pngcairo noenhanced size 720,480\nset output 'accuracy_vs_m.png'\n",
             "set logscale x 2\nset xlabel 'num_features (m)'\nset ylabel 'next-token accuracy'\nset key outside right\nset grid\n",
             plot, "\n");
}

// Loss against position bucket at the final evaluation, per group (panels): each method's
// mean over seeds (solid), and its ablations where measured (window_only dashed,
// features_only dotted). Returns the script, or "" when no point has buckets.
std::string by_position_script(const ReportData& d, const fs::path& plots) {
  const std::vector<metrics::PositionBucket>& buckets = metrics::position_buckets();
  // A point's final losses by bucket index (NaN where absent), for the model ("") or an ablation.
  const auto losses_of = [&](const ReportPoint& p, const std::string& ablation) {
    std::vector<double> out(buckets.size(), std::nan(""));
    if (!p.stability.final_eval) return out;
    const metrics::EvalRecord& e = *p.stability.final_eval;
    const metrics::ByPosition* by = &e.by_position;
    if (!ablation.empty()) {
      by = nullptr;
      for (const metrics::AblationRecord& a : e.ablations)
        if (a.name == ablation) by = &a.by_position;
      if (!by) return out;
    }
    for (const metrics::BucketMetrics& b : *by)
      for (std::size_t i = 0; i < buckets.size(); ++i)
        if (b.bucket == buckets[i].name) out[i] = b.loss;
    return out;
  };
  std::string gp, xtics;
  std::size_t panels = 0, reached = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) xtics += str(i ? ", " : "", gp_string(buckets[i].name), " ", i);
  for (const std::string& group : d.groups) {
    std::string plot;
    for (std::size_t m = 0; m < d.methods.size(); ++m)
      for (const auto& [ablation, dash] : {std::pair<std::string, int>{"", 1}, {"window_only", 2}, {"features_only", 3}}) {
        // The mean over the cell's seeds, bucket by bucket.
        std::vector<double> sum(buckets.size(), 0.0);
        std::vector<int> count(buckets.size(), 0);
        for (const ReportPoint& p : d.points) {
          if (p.group != group || p.method != d.methods[m]) continue;
          const std::vector<double> l = losses_of(p, ablation);
          for (std::size_t i = 0; i < l.size(); ++i)
            if (std::isfinite(l[i])) sum[i] += l[i], ++count[i];
        }
        std::string dat;
        for (std::size_t i = 0; i < buckets.size(); ++i)
          if (count[i]) dat += str(i, " ", sum[i] / count[i], "\n"), reached = std::max(reached, i + 1);
        if (dat.empty()) continue;
        const std::string file = safe(str("by_position_", group.empty() ? "all" : group, "_", d.methods[m],
                                          ablation.empty() ? "" : "_" + ablation)) + ".dat";
        write_file_atomic(plots / file, dat);
        plot += str(plot.empty() ? "plot " : ", \\\n     ", gp_string(file), " using 1:2 with linespoints lw 2 pt 7 dt ", dash,
                    " lc rgb ", gp_string(colour(m)), " title ",
                    gp_string(d.methods[m] + (ablation.empty() ? "" : " " + ablation)));
      }
    if (plot.empty()) continue;
    ++panels;
    const std::string seeds = d.seeds.size() > 1 ? str("mean over ", d.seeds.size(), " seeds") : std::string();
    const std::string title = group.empty() ? (seeds.empty() ? std::string("all points") : seeds)
                                            : group + (seeds.empty() ? "" : " (" + seeds + ")");
    gp += str("set title ", gp_string(title), "\n", plot, "\n");
  }
  if (!panels) return "";
  return str("# Validation loss against the context a prediction had (position buckets) at the final evaluation:\n",
             "# each method's mean over seeds (solid), window_only (dashed) and features_only (dotted) where measured.\n",
             multiplot_header("loss_by_position.png", panels, "Final validation loss by context length"),
             "set xtics (", xtics, ")\nset xrange [-0.3:", static_cast<double>(reached) - 0.7,
             "]\nset xlabel 'context (tokens)'\nset ylabel 'validation loss'\n", gp, "unset multiplot\n");
}

}  // namespace

std::vector<std::string> write_plot_scripts(const ReportData& d, const fs::path& plots) {
  std::vector<std::string> scripts;
  const std::pair<const char*, std::string> all[] = {{"loss_curves.gp", loss_script(d, plots)},
                                                     {"attention_stats.gp", attention_script(d, plots)},
                                                     {"accuracy_vs_m.gp", accuracy_script(d, plots)},
                                                     {"loss_by_position.gp", by_position_script(d, plots)}};
  for (const auto& [name, gp] : all)
    if (!gp.empty()) {
      write_file_atomic(plots / name, gp);
      scripts.push_back(name);
    }
  return scripts;
}

bool have_gnuplot() { return !find_program("gnuplot").empty(); }

std::string run_gnuplot(const fs::path& plots, const std::vector<std::string>& scripts) {
  for (const std::string& s : scripts) {
    const fs::path log = plots / (s + ".log");
    std::error_code ec;
    fs::remove(log, ec);  // spawn appends; each run's log alone
    if (wait_for_exit(spawn({"gnuplot", s}, log, current_environment(), plots)) != 0)
      return str("gnuplot failed on ", (plots / s).string(), "; see ", log.string());
  }
  return "";
}

}  // namespace dark::experiments
