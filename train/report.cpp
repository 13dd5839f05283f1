// The sweep report: Markdown tables from summary.json, gnuplot scripts and PNGs from the
// points' metrics (see report.h).
#include "train/report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "train/stability.h"
#include "train/sweep.h"

namespace dark::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kKind = "attention.kind";
const std::string kLr = "optimizer.lr";
const std::string kFeatures = "attention.num_features";

std::string value_text(const json& v) {
  if (v.is_null()) return "–";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return short_number(v.get<double>());
  if (v.is_array()) {
    std::string out;
    for (const json& item : v) out += (out.empty() ? "" : ",") + value_text(item);
    return out;
  }
  return v.dump();
}

std::string number_text(double v, const char* format = "%.4g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string leaf(const std::string& key) { return key.substr(key.rfind('.') + 1); }

// The axes that make up a point's "method": attention.kind and a trainable-parameter key.
std::vector<std::string> method_axes(const std::vector<std::string>& axes) {
  std::vector<std::string> out;
  for (const std::string& a : axes)
    if (a == kKind || leaf(a) == "trainable") out.push_back(a);
  return out;
}

std::string joined_values(const json& row, const std::vector<std::string>& keys, bool with_keys) {
  std::string out;
  for (const std::string& k : keys)
    out += (out.empty() ? "" : with_keys ? ", " : "/") + (with_keys ? leaf(k) + "=" : "") + value_text(row["values"][k]);
  return out;
}

// Distinct values of f over the rows, in first-seen (grid) order.
std::vector<std::string> distinct(const json& rows, const std::function<std::string(const json&)>& f) {
  std::vector<std::string> out;
  for (const json& r : rows)
    if (std::find(out.begin(), out.end(), f(r)) == out.end()) out.push_back(f(r));
  return out;
}

std::optional<double> eval_field(const json& row, const char* which, const char* field) {
  const json& e = row[which];
  if (!e.is_object() || !e[field].is_number()) return std::nullopt;
  return e[field].get<double>();
}

struct Metric {
  std::string title;
  std::function<std::optional<double>(const json&)> value;
  bool count = false;  // cells show "k/n" (how many of the cell's points are 1)
};

const Metric kSpikes{"Loss spikes", [](const json& r) { return std::optional<double>(r["loss_spikes"].get<double>()); }};
const Metric kDiverged{"Diverged", [](const json& r) { return std::optional<double>(r["diverged"].get<bool>() ? 1 : 0); }, true};
const Metric kFinalLoss{"Final validation loss", [](const json& r) { return eval_field(r, "final_eval", "loss"); }};
const Metric kAccuracy{"Next-token accuracy (final)", [](const json& r) { return eval_field(r, "final_eval", "accuracy"); }};

std::string cell(const std::vector<const json*>& points, const Metric& m) {
  if (points.empty()) return " ";
  double sum = 0;
  int present = 0;
  for (const json* p : points)
    if (const auto v = m.value(*p)) sum += *v, ++present;
  if (m.count) return str(static_cast<int>(sum), "/", points.size());
  return present ? number_text(sum / present) : "–";
}

// A Markdown table: one row per value of row_key, one column per value of col_axis.
std::string matrix(const json& rows, const std::string& row_title, const std::function<std::string(const json&)>& row_key,
                   const std::string& col_axis, const Metric& m) {
  const auto col_key = [&](const json& r) { return value_text(r["values"][col_axis]); };
  const auto row_values = distinct(rows, row_key), col_values = distinct(rows, col_key);
  std::string out = str("**", m.title, "**\n\n| ", row_title, " \\ ", leaf(col_axis), " |");
  for (const std::string& c : col_values) out += " " + c + " |";
  out += "\n|---|";
  for (std::size_t i = 0; i < col_values.size(); ++i) out += "---|";
  out += "\n";
  for (const std::string& rv : row_values) {
    out += "| " + rv + " |";
    for (const std::string& cv : col_values) {
      std::vector<const json*> in_cell;
      for (const json& r : rows)
        if (row_key(r) == rv && col_key(r) == cv) in_cell.push_back(&r);
      out += str(" ", cell(in_cell, m), " |");
    }
    out += "\n";
  }
  return out + "\n";
}

std::string all_points_table(const json& rows, const std::vector<std::string>& axes) {
  // Finetuning runs evaluate their starting point (step 0): show it beside the end.
  const bool has_start = std::any_of(rows.begin(), rows.end(), [](const json& r) { return eval_field(r, "start_eval", "loss").has_value(); });
  std::string out = "| point |";
  for (const std::string& a : axes) out += " " + leaf(a) + " |";
  if (has_start) out += " start val loss | start accuracy |";
  out += " status | loss spikes | largest spike (ratio @ step) | grad spikes | diverged at | final val loss | best val loss | "
         "perplexity | accuracy | wall |\n|---|";
  for (std::size_t i = 0; i < axes.size() + (has_start ? 2 : 0); ++i) out += "---|";
  out += "---|---|---|---|---|---|---|---|---|---|\n";
  for (const json& r : rows) {
    out += "| " + r["name"].get<std::string>() + " |";
    for (const std::string& a : axes) out += str(" ", value_text(r["values"][a]), " |");
    const json& big = r["largest_loss_spike"];
    const auto opt = [](std::optional<double> v, const char* format = "%.4g") { return v ? number_text(*v, format) : "–"; };
    if (has_start)
      out += str(" ", opt(eval_field(r, "start_eval", "loss")), " | ", opt(eval_field(r, "start_eval", "accuracy")), " |");
    out += str(" ", r["status"].get<std::string>(), " | ", r["loss_spikes"].dump(), " | ",
               big.is_object() ? number_text(big["ratio"].get<double>(), "%.3g") + " @ " + big["step"].dump() : "–", " | ",
               r["grad_spikes"].dump(), " | ", r["diverged"].get<bool>() ? r["divergence_step"].dump() : "–", " | ",
               opt(eval_field(r, "final_eval", "loss")), " | ", opt(eval_field(r, "best_eval", "loss")), " | ",
               opt(eval_field(r, "final_eval", "perplexity")), " | ", opt(eval_field(r, "final_eval", "accuracy")), " | ",
               r["wall_s"].is_number() ? number_text(r["wall_s"].get<double>(), "%.0f") + " s" : "–", " |\n");
  }
  return out + "\n";
}

// ---------------------------------------------------------------- plots

std::string gp_string(const std::string& s) {  // a single-quoted gnuplot string
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Writes <name>.loss.dat (step, loss) and <name>.spikes.dat (the spike steps) for each point;
// returns the loss_curves.gp script.
std::string loss_curves_script(const json& rows, const std::vector<std::string>& axes, const fs::path& plots) {
  const std::vector<std::string> methods = method_axes(axes);
  std::vector<std::string> others;
  for (const std::string& a : axes)
    if (std::find(methods.begin(), methods.end(), a) == methods.end()) others.push_back(a);
  const auto panel_of = [&](const json& r) { return methods.empty() ? std::string("all points") : joined_values(r, methods, false); };
  const auto curve_of = [&](const json& r) { return others.empty() ? r["name"].get<std::string>() : joined_values(r, others, true); };
  const std::vector<std::string> curves = distinct(rows, curve_of);

  std::vector<std::pair<std::string, std::string>> panels;  // title, plot command
  for (const std::string& panel : distinct(rows, panel_of)) {
    std::string plot;
    for (const json& r : rows) {
      if (panel_of(r) != panel) continue;
      const std::string name = r["name"];
      const RunMetrics m = read_metrics(fs::path(r["dir"].get<std::string>()) / "metrics.jsonl");
      std::string loss_dat, spike_dat;
      const json& spike_steps = r["loss_spike_steps"];
      for (const StepRecord& s : m.steps) {
        if (s.skipped || !(s.loss > 0)) continue;  // the y axis is logarithmic
        loss_dat += str(s.step, " ", s.loss, "\n");
        if (std::find(spike_steps.begin(), spike_steps.end(), json(s.step)) != spike_steps.end()) spike_dat += str(s.step, " ", s.loss, "\n");
      }
      if (loss_dat.empty()) continue;
      const auto color = std::find(curves.begin(), curves.end(), curve_of(r)) - curves.begin() + 1;
      write_file_atomic(plots / (name + ".loss.dat"), loss_dat);
      plot += str(plot.empty() ? "plot " : ", \\\n     ", gp_string(name + ".loss.dat"), " using 1:2 with lines lc ", color,
                  " title ", gp_string(curve_of(r)));
      if (!spike_dat.empty()) {
        write_file_atomic(plots / (name + ".spikes.dat"), spike_dat);
        plot += str(", \\\n     ", gp_string(name + ".spikes.dat"), " using 1:2 with points pt 7 ps 1.2 lc ", color, " notitle");
      }
    }
    if (!plot.empty()) panels.emplace_back(panel, plot);
  }
  if (panels.empty()) return "";
  const std::size_t columns = std::min<std::size_t>(panels.size(), 3), rows_n = (panels.size() + columns - 1) / columns;
  std::string gp = str("# Training loss per method (panels), one curve per remaining axis values; dots: loss spikes.\n",
                       "set terminal pngcairo noenhanced size ", 520 * columns, ",", 400 * rows_n, "\n",
                       "set output 'loss_curves.png'\nset logscale y\nset xlabel 'step'\nset ylabel 'training loss'\n",
                       "set key top right\nset grid\n",
                       "set multiplot layout ", rows_n, ",", columns, " title 'Training loss (dots: loss spikes)'\n");
  for (const auto& [title, plot] : panels) gp += str("set title ", gp_string(title), "\n", plot, "\n");
  return gp + "unset multiplot\n";
}

// Writes accuracy_m_<i>.dat (m, accuracy) per combination of the other axes; returns the script.
std::string accuracy_script(const json& rows, const std::vector<std::string>& axes, const fs::path& plots) {
  std::vector<std::string> others;
  for (const std::string& a : axes)
    if (a != kFeatures) others.push_back(a);
  const auto group_of = [&](const json& r) { return others.empty() ? std::string("accuracy") : joined_values(r, others, true); };
  std::string plot;
  int index = 0;
  for (const std::string& group : distinct(rows, group_of)) {
    std::vector<std::pair<double, double>> points;
    for (const json& r : rows)
      if (group_of(r) == group)
        if (const auto acc = eval_field(r, "final_eval", "accuracy")) points.emplace_back(r["values"][kFeatures].get<double>(), *acc);
    if (points.empty()) continue;
    std::sort(points.begin(), points.end());
    std::string dat;
    for (const auto& [m, acc] : points) dat += str(m, " ", acc, "\n");
    const std::string file = str("accuracy_m_", ++index, ".dat");
    write_file_atomic(plots / file, dat);
    plot += str(plot.empty() ? "plot " : ", \\\n     ", gp_string(file), " using 1:2 with linespoints pt 7 title ", gp_string(group));
  }
  if (plot.empty()) return "";
  return str("# Final next-token accuracy against the number of random features m.\n",
             "set terminal pngcairo noenhanced size 720,480\nset output 'accuracy_vs_m.png'\n",
             "set logscale x 2\nset xlabel 'num_features (m)'\nset ylabel 'next-token accuracy'\nset key bottom right\nset grid\n",
             plot, "\n");
}

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

// Runs each script in `plots`; returns "" or what went wrong.
std::string run_gnuplot(const fs::path& plots, const std::vector<std::string>& scripts) {
  for (const std::string& s : scripts) {
    const std::string command = str("cd ", gp_string(plots.string()), " && gnuplot ", s, " > ", s, ".log 2>&1");
    if (std::system(command.c_str()) != 0)
      return str("gnuplot failed on ", (plots / s).string(), "; see ", (plots / (s + ".log")).string());
  }
  return "";
}

}  // namespace

ReportResult write_report(const fs::path& sweep_dir) {
  const fs::path summary_path = sweep_dir / "summary.json";
  DARK_CHECK(fs::exists(summary_path), "report: ", summary_path.string(), " not found (run `darkformer sweep` first)");
  const json summary = json::parse(read_file(summary_path), nullptr, /*allow_exceptions=*/false);
  DARK_CHECK(summary.is_object() && summary["points"].is_array() && summary["axes"].is_array(), "report: ",
             summary_path.string(), ": not a sweep summary (expected \"axes\" and \"points\")");
  const json& rows = summary["points"];
  const std::vector<std::string> axes = summary["axes"];
  const std::vector<std::string> methods = method_axes(axes);
  const auto has_axis = [&](const std::string& a) { return std::find(axes.begin(), axes.end(), a) != axes.end(); };
  const auto method_of = [&](const json& r) { return joined_values(r, methods, false); };
  const std::string method_title = methods.size() == 1 ? leaf(methods[0]) : "method";

  int counts[3] = {0, 0, 0};
  for (const json& r : rows) counts[r["status"] == "done" ? 0 : r["status"] == "diverged" ? 1 : 2]++;
  std::string md = str("# Sweep report: ", sweep_dir.filename().string(), "\n\n",
                       "Generated by `darkformer report` from `summary.json` (sweep file `",
                       summary.value("sweep_file", "?"), "`): ", rows.size(), " points, ", counts[0], " done, ", counts[1],
                       " diverged, ", counts[2], " failed or not run.\n\n",
                       "A loss spike is a step whose training loss exceeds `stability.loss_factor` (default 1.2) times the "
                       "median of the previous `stability.window` (default 50) steps; a run diverged at its first skipped "
                       "or non-finite step, or when, after warm-up, the median loss of `stability.window` / 5 consecutive steps "
                       "rose above its initial loss (the highest of its first `stability.window` / 5 steps). Accuracy is next-token top-1 "
                       "on the validation windows at the end of the run. Cells that hold several points show their mean "
                       "(divergence: diverged/points).\n\n");
  if (!methods.empty() && has_axis(kLr)) {
    md += "## Method x learning rate\n\n";
    for (const Metric* m : {&kSpikes, &kDiverged, &kFinalLoss, &kAccuracy}) md += matrix(rows, method_title, method_of, kLr, *m);
  }
  if (has_axis(kFeatures)) {
    md += "## Method x number of random features (m)\n\n";
    const auto row_key = [&](const json& r) { return methods.empty() ? std::string("all") : method_of(r); };
    for (const Metric* m : {&kFinalLoss, &kAccuracy, &kSpikes}) md += matrix(rows, method_title, row_key, kFeatures, *m);
  }
  md += "## All points\n\n" + all_points_table(rows, axes);

  ReportResult result;
  const fs::path plots = sweep_dir / "plots";
  fs::create_directories(plots);
  std::vector<std::string> scripts;
  if (const std::string gp = loss_curves_script(rows, axes, plots); !gp.empty()) {
    write_file_atomic(plots / "loss_curves.gp", gp);
    scripts.push_back("loss_curves.gp");
  }
  if (has_axis(kFeatures))
    if (const std::string gp = accuracy_script(rows, axes, plots); !gp.empty()) {
      write_file_atomic(plots / "accuracy_vs_m.gp", gp);
      scripts.push_back("accuracy_vs_m.gp");
    }
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

}  // namespace dark::train
