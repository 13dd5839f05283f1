// `darkformer sweep` and `darkformer report` end to end on a tiny model: a 2x2 grid (attention
// kind x learning rate) whose huge-lr points diverge and stop early while the others finish;
// re-running skips finished points and resumes an interrupted one from its checkpoint; the
// report's tables come from the summary. Also: point names and sweep-file errors. A sweep
// stopped by SIGTERM records its points as interrupted and exits 75; a sweep killed with
// SIGKILL leaves no point running (each saves its step and exits), and re-runs resume every
// point to the losses of an uninterrupted run, no metrics line written twice. Seeds and named
// variants: the grid, names and configs they give and their errors; a second sweep file extends
// a folder's summary; a seeded report pairs methods by seed, finds the redraws' shocks and
// re-derives spikes with the settings it is given.
#include <gtest/gtest.h>

#include <sys/prctl.h>

#include <fstream>

#include "child_process.h"
#include "test_util.h"
#include "train/formats/checkpoint.h"
#include "train/config.h"
#include "train/experiments/report.h"
#include "train/experiments/report_data.h"
#include "train/metrics/stability.h"
#include "train/stop_signal.h"
#include "train/experiments/sweep.h"
#include "train/experiments/sweep_progress.h"
#include "train_test_util.h"

namespace dark::train {
namespace {

using dark::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// base.json (a tiny run) and sweeps/grid.json beside it, written as text: the file's axis
// order is the grid's order; returns the sweep file. No warm-up and a spike window of 5 (so
// the divergence rule compares single steps with the first), so that lr 100 counts as
// diverged at once (its loss explodes above the initial loss on step 2).
fs::path write_sweep(const TempDir& tmp, const std::string& axes, const std::string& name_keys = "{}") {
  json base = tiny_config(tmp, "unused", 20);
  base.erase("output");
  base["training"]["generate_tokens"] = 0;
  dark::testing::write_text(tmp / "base.json", base.dump(2));
  dark::testing::write_text(tmp / "sweeps/grid.json",
                            str(R"({"base": "../base.json", "set": {"stability.stop_on_divergence": true, "stability.window": 5, "schedule.warmup_steps": 0}, "axes": )", axes,
                                R"(, "output": ")", tmp / "out", R"(", "name_keys": )", name_keys, "}"));
  return tmp.path() / "sweeps/grid.json";
}

// The sweep's console: a running point's newest progress line from its train.log (spdlog's
// prefix cut), once, with the sweep's count and, once a point has ended, its ETA.
TEST(Sweep, ProgressLinesComeFromThePointsLogs) {
  TempDir tmp;
  const auto append = [&](const std::string& name, const std::string& text) {
    std::ofstream(tmp / name, std::ios::app) << text;
  };
  append("a.log", "==== sweep: starting ====\n");
  experiments::SweepProgress progress(3, 0, 1, std::chrono::milliseconds(0));
  progress.started(101, "a", tmp / "a.log");
  EXPECT_TRUE(progress.poll().empty());  // what was there before it started is not news
  append("a.log", "[2026-12-06 22:22:10.900] [info] model: 3.3M parameters\n"
                  "[2026-12-06 22:22:11.000] [info] [#...] step 1/10 | loss 5.0 | ETA <= 9s\n"
                  "[2026-12-06 22:22:12.000] [info] [##..] step 2/10 | loss 4.0 | ETA 8s\n"
                  "[2026-12-06 22:22:13.000] [info] [###.] step 3/10 | loss 3.0 | ETA 7");  // not ended yet
  EXPECT_EQ(progress.poll(), std::vector<std::string>{"[a] [##..] step 2/10 | loss 4.0 | ETA 8s | sweep: 0/3 done"});
  EXPECT_TRUE(progress.poll().empty());
  append("a.log", "s\n[2026-12-06 22:22:14.000] [info] evaluation: batch 4/4 [####] | 2.00 s/batch | done in 8s\n");
  EXPECT_EQ(progress.poll(),
            std::vector<std::string>{"[a] evaluation: batch 4/4 [####] | 2.00 s/batch | done in 8s | sweep: 0/3 done"});
  progress.ended(101);
  progress.started(102, "b", tmp / "b.log");  // no log yet
  EXPECT_TRUE(progress.poll().empty());
  append("b.log", "[t] [info] transfer step    10/200 [#...] | loss 2.4 | 0.40 s/step | ETA 1m16s\n");
  const std::vector<std::string> lines = progress.poll();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].starts_with("[b] transfer step    10/200 [#...] | loss 2.4 | 0.40 s/step | ETA 1m16s | sweep: 1/3 done, ETA "))
      << lines[0];
  EXPECT_EQ(experiments::progress_of_log_line("[x] [info] data: ready"), "");
}

TEST(Sweep, PointNamesUseShortNumbers) {
  EXPECT_EQ(experiments::short_number(0.003), "3e-3");
  EXPECT_EQ(experiments::short_number(3e-4), "3e-4");
  EXPECT_EQ(experiments::short_number(0.01), "0.01");
  EXPECT_EQ(experiments::short_number(0.5), "0.5");
  EXPECT_EQ(experiments::short_number(64), "64");
  EXPECT_EQ(experiments::short_number(1e6), "1e6");
  EXPECT_EQ(experiments::short_number(0.00025), "2.5e-4");
}

TEST(Sweep, BadPointsAreReportedBeforeAnythingRuns) {
  TempDir tmp;
  const fs::path file = write_sweep(tmp, R"({"attention.kind": ["softmax", "flash"]})");
  dark::testing::expect_error([&] { experiments::plan_sweep(file); },
                              {"sweep: ", "grid.json: point flash: config: attention.kind: \"flash\" is not one of softmax, performer"});
  const fs::path typo = write_sweep(tmp, R"({"optimizer.lrr": [0.1]})");
  dark::testing::expect_error([&] { experiments::plan_sweep(typo); }, {"grid.json: axes.optimizer.lrr", "did you mean optimizer.lr?"});
  EXPECT_FALSE(fs::exists(tmp.path() / "out"));
}

// sweep --set: every point gets the overrides, after the file's "set" (which it may replace)
// and before the axes (which replace it); a bad one is refused naming it; --dry-run lists them.
TEST(Sweep, SetOverridesEveryPointBeforeTheAxes) {
  TempDir tmp;
  const fs::path file = write_sweep(tmp, R"({"optimizer.lr": [0.01, 0.02]})");
  const experiments::SweepPlan plan =
      experiments::plan_sweep(file, {"training.steps=7", "stability.window=9", "optimizer.lr=0.5"});
  ASSERT_EQ(plan.points.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const RunConfig c = parse_config(plan.points[i].config);
    EXPECT_EQ(c.training.steps, 7);
    EXPECT_EQ(c.stability.window, 9);                     // replaces the file's "set" (5)
    EXPECT_DOUBLE_EQ(c.optimizer.lr, i == 0 ? 0.01 : 0.02);  // the axis wins
  }
  EXPECT_NE(experiments::describe_plan(plan).find("every point with --set: training.steps=7 stability.window=9 "
                                                  "optimizer.lr=0.5"),
            std::string::npos);
  dark::testing::expect_error([&] { experiments::plan_sweep(file, {"training.stepz=7"}); },
                              {"sweep: --set training.stepz=7: ", "did you mean training.steps?"});
  dark::testing::expect_error([&] { experiments::plan_sweep(file, {"training.steps"}); },
                              {"sweep: --set training.steps: ", "expected key=value"});
  EXPECT_FALSE(fs::exists(tmp.path() / "out"));
}

TEST(Sweep, DivergedPointsAreRecordedResumesAndReports) {
  TempDir tmp;
  const fs::path file = write_sweep(tmp, R"({"attention.kind": ["softmax", "performer"], "optimizer.lr": [0.01, 100]})",
                                    R"({"optimizer.lr": "lr"})");
  const experiments::SweepPlan plan = experiments::plan_sweep(file);
  ASSERT_EQ(plan.points.size(), 4u);
  EXPECT_EQ(plan.axes, (std::vector<std::string>{"attention.kind", "optimizer.lr"}));
  EXPECT_EQ(plan.points[0].name, "softmax_lr0.01");
  EXPECT_EQ(plan.points[3].name, "performer_lr100");

  experiments::SweepOptions options;
  options.jobs = 2;
  options.executable = DARKFORMER_EXE;
  const json summary = experiments::run_sweep(plan, options);
  std::map<std::string, json> by_name;
  for (const json& r : summary["points"]) by_name[r["name"]] = r;
  for (const char* name : {"softmax_lr0.01", "performer_lr0.01"}) {
    EXPECT_EQ(by_name[name]["status"], "done") << read(tmp.path() / "out" / name / "train.log");
    EXPECT_EQ(by_name[name]["steps"], 20);
    EXPECT_TRUE(by_name[name]["final_eval"].is_object());
    EXPECT_TRUE(fs::exists(tmp.path() / "out" / name / "stability.json"));
  }
  for (const char* name : {"softmax_lr100", "performer_lr100"}) {
    EXPECT_EQ(by_name[name]["status"], "diverged") << read(tmp.path() / "out" / name / "train.log");
    EXPECT_LT(by_name[name]["steps"].get<int>(), 20);  // stopped early
    const json s = json::parse(read(tmp.path() / "out" / name / "stability.json"));
    EXPECT_TRUE(s["stopped_on_divergence"].get<bool>());
    EXPECT_TRUE(formats::list_checkpoints(tmp.path() / "out" / name).empty());
  }
  const std::string csv = read(tmp.path() / "out/summary.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
  EXPECT_NE(csv.find("softmax_lr100,softmax,100,diverged,"), std::string::npos) << csv;

  // Interrupt one point after its step-10 checkpoint: no status, no final checkpoint.
  const fs::path cut = tmp.path() / "out/performer_lr0.01";
  fs::remove(cut / "status.json");
  fs::remove_all(cut / "checkpoints" / formats::checkpoint_name(20));
  std::map<std::string, fs::file_time_type> before;
  for (const experiments::SweepPoint& p : plan.points) before[p.name] = fs::last_write_time(p.dir / "train.log");
  EXPECT_NE(experiments::describe_plan(plan).find("performer_lr0.01: attention.kind=\"performer\", optimizer.lr=0.01 -> resume from step_00000010"),
            std::string::npos)
      << experiments::describe_plan(plan);

  const json again = experiments::run_sweep(plan, options);
  for (const experiments::SweepPoint& p : plan.points)
    if (p.name != "performer_lr0.01") EXPECT_EQ(fs::last_write_time(p.dir / "train.log"), before[p.name]) << p.name << " ran again";
  EXPECT_NE(read(cut / "train.log").find("==== sweep: resuming from step_00000010 ===="), std::string::npos);
  EXPECT_EQ(json::parse(read(cut / "status.json"))["status"], "done");
  EXPECT_EQ(metrics::read_metrics(cut / "metrics.jsonl").steps.size(), 20u);
  EXPECT_NE(read(tmp.path() / "out/sweep.log").find("softmax_lr0.01: already done, skipped"), std::string::npos);
  EXPECT_EQ(again["points"][3]["status"], "diverged");

  const experiments::ReportResult report = experiments::write_report(tmp.path() / "out");
  const std::string md = read(report.markdown);
  EXPECT_NE(md.find("## Method x learning rate"), std::string::npos) << md;
  EXPECT_NE(md.find("| kind \\ lr | 0.01 | 100 |"), std::string::npos) << md;
  EXPECT_NE(md.find("**Diverged**\n\n| kind \\ lr | 0.01 | 100 |\n|---|---|---|\n| softmax | 0/1 | 1/1 |\n| performer | 0/1 | 1/1 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| performer_lr100 | performer | 100 | diverged |"), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(tmp.path() / "out/plots/loss_curves.gp"));
  // The plot marks where each diverged run diverged, keeps its legend off the curves, and its
  // y-axis reaches the first loss of every run shown.
  const std::string gp = read(tmp.path() / "out/plots/loss_curves.gp");
  for (const char* name : {"softmax_lr100", "performer_lr100"}) {
    const std::int64_t at = by_name[name]["divergence_step"].get<std::int64_t>();
    const std::string kind = std::string(name).substr(0, std::string(name).find('_'));
    EXPECT_NE(gp.find(str("set arrow from first ", at, ", graph 0 to first ", at, ", graph 1 nohead dt 2")), std::string::npos) << gp;
    EXPECT_NE(gp.find(str("set label 'diverged (", kind, ")' at first ", at)), std::string::npos) << gp;
    std::int64_t x_end = 0;  // the panels' x ranges reach the mark
    for (std::size_t x = gp.find("set xrange [*:"); x != std::string::npos; x = gp.find("set xrange [*:", x + 1))
      x_end = std::max<std::int64_t>(x_end, std::stoll(gp.substr(x + 14)));
    EXPECT_GT(x_end, at) << gp;
  }
  EXPECT_NE(gp.find("set key below"), std::string::npos) << gp;
  for (std::size_t at = gp.find("set yrange ["); at != std::string::npos; at = gp.find("set yrange [", at + 1)) {
    const double top = std::stod(gp.substr(gp.find(':', at) + 1));
    const std::size_t panel_end = gp.find("unset arrow", at);
    // every run plotted in this panel: its first loss is inside the range
    for (const auto& [name, row] : by_name) {
      if (gp.substr(at, panel_end - at).find(name + ".loss.dat") == std::string::npos) continue;
      const double first = metrics::read_metrics(tmp.path() / "out" / name / "metrics.jsonl").steps.front().loss;
      EXPECT_LE(first, top) << name;
    }
  }
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(report.plotted) << report.plot_note;
    EXPECT_TRUE(fs::exists(tmp.path() / "out/plots/loss_curves.png"));
  } else {
    EXPECT_NE(md.find("gnuplot is not installed"), std::string::npos) << md;
  }
}

TEST(Sweep, SeedsAndNamedVariantsMakeTheGrid) {
  TempDir tmp;
  const fs::path file = write_sweep(
      tmp, R"({"method": {"performer": {"attention.kind": "performer"},
                          "dark-whiten": {"attention.kind": "darkformer", "attention.darkformer.init": "whiten"}},
               "optimizer.lr": [0.01]}, "seeds": [4, 5])",
      R"({"optimizer.lr": "lr"})");
  const experiments::SweepPlan plan = experiments::plan_sweep(file);
  EXPECT_EQ(plan.axes, (std::vector<std::string>{"method", "optimizer.lr", "seed"}));
  ASSERT_EQ(plan.points.size(), 4u);
  EXPECT_EQ(plan.points[0].name, "performer_lr0.01_seed4");
  EXPECT_EQ(plan.points[3].name, "dark-whiten_lr0.01_seed5");
  const RunConfig c = parse_config(plan.points[3].config);
  EXPECT_EQ(c.attention.kind, attention::Kind::darkformer);
  EXPECT_EQ(c.attention.darkformer.init, attention::MatrixInit::whiten);
  EXPECT_EQ(c.seed, 5);
  EXPECT_EQ(parse_config(plan.points[0].config).attention.kind, attention::Kind::performer);

  dark::testing::expect_error([&] { experiments::plan_sweep(write_sweep(tmp, R"({"seed": [1]}, "seeds": [2])")); },
                              {"seeds: \"seed\" is also an axis"});
  dark::testing::expect_error([&] { experiments::plan_sweep(write_sweep(tmp, R"({"optimizer.lr": [0.01]}, "seeds": [1, 1])")); },
                              {"seeds: seed 1 twice"});
  dark::testing::expect_error([&] { experiments::plan_sweep(write_sweep(tmp, R"({"optimizer.lr": [0.01]}, "seeds": [-1])")); },
                              {"seeds: expected non-negative integers"});
  dark::testing::expect_error([&] { experiments::plan_sweep(write_sweep(tmp, R"({"method": {"a": "performer"}})")); },
                              {"axes.method.a: expected an object of dotted config keys"});
  dark::testing::expect_error([&] { experiments::plan_sweep(write_sweep(tmp, R"({"method": {"a": {"attention.kind": "flash"}}})")); },
                              {"point a: config: attention.kind: \"flash\" is not one of"});
}

TEST(Sweep, SeededReportsPairMethodsAndASecondSweepFileExtendsTheFolder) {
  TempDir tmp;
  json base = tiny_config(tmp, "unused", 20);
  base.erase("output");
  base["training"].update({{"generate_tokens", 0}, {"log_interval", 5}, {"checkpoint_interval", 0}});
  base["attention"] = {{"num_features", 8}, {"redraw_interval", 6}};
  base["stability"] = {{"redraw_eval_batches", 1}, {"redraw_window", 3}};
  dark::testing::write_text(tmp / "base.json", base.dump(2));
  const auto sweep_file = [&](const std::string& name, const json& seeds) {
    const json sweep = {{"base", "../base.json"}, {"axes", {{"attention.kind", {"performer", "lfk"}}}}, {"seeds", seeds},
                        {"output", tmp / "out"}};
    dark::testing::write_text(tmp / ("sweeps/" + name + ".json"), sweep.dump(2));
    return experiments::plan_sweep(tmp.path() / ("sweeps/" + name + ".json"));
  };
  experiments::SweepOptions options;
  options.jobs = 2;
  options.executable = DARKFORMER_EXE;
  experiments::run_sweep(sweep_file("first", {1}), options);
  const json summary = experiments::run_sweep(sweep_file("more", {2, 3}), options);
  ASSERT_EQ(summary["points"].size(), 6u);  // the first file's points stay
  EXPECT_EQ(summary["points"][4]["name"], "performer_seed1");

  const experiments::ReportResult report = experiments::write_report(tmp.path() / "out");
  const std::string md = read(report.markdown);
  EXPECT_NE(md.find("## Redraw shocks (mean ± sd over 3 seeds)"), std::string::npos) << md;
  EXPECT_NE(md.find("## Paired comparisons by seed"), std::string::npos) << md;
  // Performer redraws at steps 7, 13 and 19 (every 6 steps, measured on 1 validation batch):
  // its held-out jump is the mean over seeds of the trainer's before/after losses.
  double sum = 0;
  for (const char* point : {"performer_seed1", "performer_seed2", "performer_seed3"}) {
    const metrics::RunMetrics m = metrics::read_metrics(tmp.path() / "out" / point / "metrics.jsonl");
    ASSERT_EQ(m.redraws.size(), 3u) << point;
    EXPECT_EQ(m.redraws[2].step, 19);
    for (const metrics::RedrawRecord& r : m.redraws) sum += (r.held_out_after - r.held_out_before) / 3;
  }
  char want[64];
  std::snprintf(want, sizeof want, "| performer | %.3g ± ", sum / 3);
  EXPECT_NE(md.find(str("**Held-out jump at a redraw, mean (nats)**\n\n| kind |")), std::string::npos) << md;
  EXPECT_NE(md.find(want), std::string::npos) << want << "\n" << md;
  EXPECT_NE(md.find("| lfk | – |"), std::string::npos) << md;  // lfk redraws nothing
  EXPECT_NE(md.find("| all | final val loss | performer − lfk |"), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(tmp.path() / "out/plots/attention_stats.gp"));
  EXPECT_EQ(md.find("## Attention transfer"), std::string::npos) << "no point transferred";

  // Points with a transfer.json (train/swap/transfer.h's format) get its numbers: the loss at the
  // swap, the layers' median errors averaged, their pairs by seed.
  for (int seed = 1; seed <= 3; ++seed) {
    const json layers = {{{"layer", 0}, {"error_before", {{"median", 1.0 + seed}}}, {"error_after", {{"median", 0.1 * seed}}},
                          {"before", {{"attention_kl", 2.0 * seed}}}, {"after", {{"attention_kl", 0.5}}}},
                         {{"layer", 1}, {"error_before", {{"median", 3.0 + seed}}}, {"error_after", {{"median", 0.3 * seed}}},
                          {"before", {{"attention_kl", 4.0 * seed}}}, {"after", {{"attention_kl", 1.5}}}}};
    const json transfer = {{"seconds", 10.0 * seed}, {"peak_resident_mib", 100.0}, {"validation_at_swap", {{"loss", 4.0 + seed}}},
                           {"collapsed_layers", seed == 2 ? 1 : 0}, {"layers", layers}};
    dark::testing::write_text(tmp / str("out/performer_seed", seed, "/transfer.json"), transfer.dump());
    const json without_layers = {{"validation_at_swap", {{"loss", 4.0 + 0.5 * seed}}}};
    dark::testing::write_text(tmp / str("out/lfk_seed", seed, "/transfer.json"), without_layers.dump());
  }
  const std::string with_transfer = read(experiments::write_report(tmp.path() / "out").markdown);
  const auto table_row = [&](const std::string& title, const std::string& row) {
    const std::size_t at = with_transfer.find("**" + title);
    EXPECT_NE(at, std::string::npos) << title << "\n" << with_transfer;
    if (at == std::string::npos) return;
    const std::size_t end = with_transfer.find("\n\n", with_transfer.find("|---", at));
    EXPECT_NE(with_transfer.substr(at, end - at).find(row), std::string::npos) << row << "\n" << with_transfer.substr(at, end - at);
  };
  EXPECT_NE(with_transfer.find("## Attention transfer (mean ± sd over 3 seeds)"), std::string::npos) << with_transfer;
  table_row("Validation loss at the swap", "| performer | 6 ± 1 |");   // 5, 6, 7
  table_row("Attention-output error before", "| performer | 4 ± 1 |");  // (2 + 4) / 2, 3, 4
  table_row("Attention-output error after", "| performer | 0.4 ± 0.2 |");  // 0.2, 0.4, 0.6
  table_row("Attention-output error after", "| lfk | – |");  // its transfer.json lists no layers
  table_row("Transfer time", "| performer | 20 ± 10 |");
  table_row("Attention-weight divergence before", "| performer | 6 ± 3 |");  // (2 + 4) / 2 x seed: 3, 6, 9
  table_row("Attention-weight divergence after", "| performer | 1 |");  // the same in every seed: no spread shown
  table_row("Swapped layers collapsed", "| performer | 0.333 ± 0.58 |");
  // performer − lfk at the swap: 0.5, 1, 1.5 (t quantile 4.303 for 2 degrees of freedom, sd 0.5)
  EXPECT_NE(with_transfer.find("| all | val loss at swap | performer − lfk | +1 | [-0.242, +2.24] | 3 | not distinguishable |"),
            std::string::npos)
      << with_transfer;
  dark::testing::write_text(tmp / "out/lfk_seed1/transfer.json", "[1, 2");
  dark::testing::expect_error([&] { experiments::write_report(tmp.path() / "out"); }, {"lfk_seed1/transfer.json", "not a transfer report"});
  fs::remove(tmp.path() / "out/lfk_seed1/transfer.json");

  // The report re-derives spikes with the settings it is given: a margin of 0 and 0.5 sd calls
  // batch noise spikes, more than the runs' own settings do.
  experiments::ReportOptions loose;
  loose.stability_overrides = {"loss_sigmas=0.5", "stability.loss_margin=0", "window=5"};
  const auto spike_count = [&](const experiments::ReportOptions& o) {
    std::size_t n = 0;
    for (const experiments::ReportPoint& p : experiments::load_report_data(tmp.path() / "out", o.stability_overrides).points) n += p.stability.loss_spikes.size();
    return n;
  };
  EXPECT_GT(spike_count(loose), spike_count({}));
  const std::string loose_md = read(experiments::write_report(tmp.path() / "out", loose).markdown);
  EXPECT_NE(loose_md.find("(settings given to the report, not the runs' own)"), std::string::npos);
  EXPECT_NE(loose_md.find("more than 0.5 noise standard deviations"), std::string::npos) << loose_md;
  dark::testing::expect_error([&] { experiments::write_report(tmp.path() / "out", experiments::ReportOptions{{"loss_sigmas=-1"}}); },
                              {"report: --set stability.loss_sigmas=-1", "loss_sigmas"});
}

TEST(Sweep, ALauncherTrainsEachPointOnSeveralRanks) {
  ASSERT_TRUE(fs::exists(DARK_MPIEXEC)) << "mpirun not found: install Open MPI with scripts/install-deps.sh";
  TempDir tmp;
  const experiments::SweepPlan plan = experiments::plan_sweep(write_sweep(tmp, R"({"attention.kind": ["softmax"]})"));
  EXPECT_TRUE(plan.launcher.empty());
  experiments::SweepOptions options;
  options.executable = DARKFORMER_EXE;
  options.launcher = str(DARK_MPIEXEC, "  -np 2 --oversubscribe\t--allow-run-as-root --bind-to none");
  const json summary = experiments::run_sweep(plan, options);
  const fs::path point = tmp.path() / "out/softmax";
  EXPECT_EQ(summary["points"][0]["status"], "done") << read(point / "train.log");
  EXPECT_NE(read(point / "train.log").find("data parallel: 2 rank(s), backend mpi"), std::string::npos)
      << read(point / "train.log");
  EXPECT_NE(read(tmp.path() / "out/sweep.log").find("each under: " + std::string(DARK_MPIEXEC) + " -np 2"),
            std::string::npos);

  // In the sweep file: split at spaces; anything but a string is an error.
  json sweep = json::parse(read(tmp.path() / "sweeps/grid.json"));
  sweep["launcher"] = "mpirun -np 4";
  dark::testing::write_text(tmp / "sweeps/grid.json", sweep.dump());
  EXPECT_EQ(experiments::plan_sweep(tmp.path() / "sweeps/grid.json").launcher, (std::vector<std::string>{"mpirun", "-np", "4"}));
  sweep["launcher"] = 4;
  dark::testing::write_text(tmp / "sweeps/grid.json", sweep.dump());
  try {
    experiments::plan_sweep(tmp.path() / "sweeps/grid.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("launcher: expected a command"), std::string::npos) << e.what();
  }
}

// Two points of 150 steps (checkpoints every 20) that a test can catch running.
fs::path write_long_sweep(const TempDir& tmp) {
  json base = tiny_config(tmp, "unused", 150);
  base.erase("output");
  base["training"].update({{"generate_tokens", 0}, {"checkpoint_interval", 20}, {"eval_interval", 50}});
  dark::testing::write_text(tmp / "base.json", base.dump(2));
  const json sweep = {{"base", "../base.json"}, {"axes", {{"optimizer.lr", {0.01, 0.02}}}}, {"output", tmp / "out"}};
  dark::testing::write_text(tmp / "sweeps/long.json", sweep.dump(2));
  return tmp.path() / "sweeps/long.json";
}

// Every point finished with its steps logged once each, in order.
void expect_points_complete(const TempDir& tmp, const json& summary) {
  for (const json& row : summary["points"]) {
    const fs::path dir = row["dir"].get<std::string>();
    EXPECT_EQ(row["status"], "done") << read(dir / "train.log");
    std::vector<std::int64_t> want(150);
    for (int i = 0; i < 150; ++i) want[i] = i + 1;
    EXPECT_EQ(dark::testing::logged_steps(dir), want) << row["name"];
  }
  EXPECT_EQ(dark::testing::read_all(tmp / "out/.lock"), "");
}

TEST(Sweep, ASigtermStopsThePointsRecordsThemAndARerunResumesThem) {
  TempDir tmp;
  const fs::path file = write_long_sweep(tmp);
  const std::vector<std::string> sweep = {DARKFORMER_EXE, "sweep", "--config", file.string(), "--jobs", "1"};
  const pid_t pid = dark::testing::start_child(sweep, tmp / "sweep.log");
  ASSERT_TRUE(dark::testing::wait_for_steps(tmp / "out/lr0.01", 5)) << read(tmp / "sweep.log");
  ::kill(pid, SIGTERM);
  ASSERT_EQ(dark::testing::wait_child(pid, std::chrono::seconds(60)), kStoppedBySignal) << read(tmp / "sweep.log");
  const json summary = json::parse(read(tmp / "out/summary.json"));
  EXPECT_EQ(summary["stopped_by_signal"], "SIGTERM");
  EXPECT_EQ(summary["points"][0]["status"], "interrupted") << read(tmp / "out/lr0.01/train.log");
  EXPECT_EQ(summary["points"][1]["status"], "not run");
  EXPECT_EQ(json::parse(read(tmp / "out/lr0.01/status.json"))["exit_code"], kStoppedBySignal);
  const std::int64_t at = dark::testing::logged_steps(tmp.path() / "out/lr0.01").back();
  ASSERT_LT(at, 150);
  EXPECT_TRUE(fs::exists(tmp.path() / "out/lr0.01/checkpoints" / formats::checkpoint_name(at)));
  EXPECT_NE(read(tmp / "out/sweep.log").find("sweep stopped by signal: 0 done, 0 diverged, 0 failed, 1 interrupted, 1 not run"),
            std::string::npos)
      << read(tmp / "out/sweep.log");

  ASSERT_EQ(dark::testing::run_child({DARKFORMER_EXE, "sweep", "--config", file.string(), "--jobs", "2"}, tmp / "again.log"), 0)
      << read(tmp / "again.log");
  EXPECT_NE(read(tmp / "out/lr0.01/train.log").find("==== sweep: resuming from " + formats::checkpoint_name(at)), std::string::npos);
  expect_points_complete(tmp, json::parse(read(tmp / "out/summary.json")));
}

TEST(Sweep, AKilledSweepLeavesNoPointRunningAndARerunResumesEveryPoint) {
  TempDir tmp;
  const fs::path file = write_long_sweep(tmp);
  // Orphans are re-parented to this process, which can then see how they ended.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const std::vector<std::string> sweep = {DARKFORMER_EXE, "sweep", "--config", file.string(), "--jobs", "2"};
  const pid_t pid = dark::testing::start_child(sweep, tmp / "sweep.log");
  for (const char* point : {"lr0.01", "lr0.02"})
    ASSERT_TRUE(dark::testing::wait_for_steps(tmp.path() / "out" / point, 5)) << read(tmp / "sweep.log");
  const std::vector<pid_t> points = dark::testing::children_of(pid);
  ASSERT_EQ(points.size(), 2u);
  for (const pid_t point : points) {
    // Under the program's real path, as ps and top show it.
    const std::vector<std::string> words = dark::testing::command_line(point);
    ASSERT_GE(words.size(), 2u);
    EXPECT_EQ(words[0], fs::canonical(DARKFORMER_EXE).string());
    EXPECT_EQ(words[1], "train");
  }
  ::kill(pid, SIGKILL);
  ASSERT_EQ(dark::testing::wait_child(pid, std::chrono::seconds(30)), 128 + SIGKILL);
  for (const pid_t point : points) {
    // The parent-death signal: each point saves its step and ends (75) instead of living on.
    EXPECT_EQ(dark::testing::wait_child(point, std::chrono::seconds(60)), kStoppedBySignal)
        << "point process " << point << "; logs:\n" << read(tmp / "out/lr0.01/train.log") << "\n----\n"
        << read(tmp / "out/lr0.02/train.log");
    EXPECT_NE(::kill(point, 0), 0) << "point process " << point << " survived the sweep";
  }
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 0), 0);

  ASSERT_EQ(dark::testing::run_child(sweep, tmp / "again.log"), 0) << read(tmp / "again.log");
  EXPECT_NE(read(tmp / "again.log").find("sweep folder " + (tmp / "out") + ": taking over the lock left by process " +
                                         std::to_string(pid)),
            std::string::npos)
      << read(tmp / "again.log");
  const json summary = json::parse(read(tmp / "out/summary.json"));
  expect_points_complete(tmp, summary);
  // The point trained in two pieces has the losses of one trained at once.
  const fs::path point = tmp.path() / "out/lr0.01";
  EXPECT_NE(read(point / "train.log").find("==== sweep: resuming from step_"), std::string::npos);
  ASSERT_EQ(dark::testing::run_child({DARKFORMER_EXE, "train", "--config", (point / "point_config.json").string(), "--set",
                                      "output.dir=" + (tmp / "whole")},
                                     tmp / "whole.log"),
            0)
      << read(tmp / "whole.log");
  EXPECT_EQ(losses(point), losses(tmp.path() / "whole"));
}

}  // namespace
}  // namespace dark::train
