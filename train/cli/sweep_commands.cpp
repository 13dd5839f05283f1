// The `darkformer sweep` and `darkformer report` subcommands (see commands.h, sweep.h, report.h).
#include <cstdio>

#include "core/error.h"
#include "train/cli/args.h"
#include "train/cli/commands.h"
#include "train/experiments/report.h"
#include "train/stop_signal.h"
#include "train/experiments/sweep.h"

namespace dark::cli {

int sweep_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {
      {"--config", "FILE", "", "sweep file (JSON: base, set, axes, output, name_keys); required"},
      {"--jobs", "N", "1", "points trained at once (each child gets OMP_NUM_THREADS = cores / N unless set)"},
      {"--launcher", "COMMAND", "", "run each point under this command, e.g. \"mpirun -np 2\" (overrides the sweep "
                                    "file's launcher)"},
      {"--set", "KEY=VALUE", "",
       "override a config key of every point, after the sweep file's \"set\" and before the axes, e.g. --set "
       "training.steps=50 (repeatable; run again with the same settings to resume)",
       true},
      {"--dry-run", "", "", "check every point's config and list what would run; write nothing"},
      kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer sweep --config FILE [--jobs N] [--launcher COMMAND] [--set KEY=VALUE]... "
                           "[--dry-run]\n"
                           "Trains every point of a grid of config overrides as its own `darkformer train` process;\n"
                           "finished points are skipped and interrupted ones resumed when run again. SIGTERM or SIGINT\n"
                           "stops the running points (each saves its step), records them as interrupted and exits 75.\n"
                           "See README.md.",
                     specs))
    return 0;
  Args a(args, specs);
  const long long jobs = a.integer("--jobs");
  DARK_CHECK(jobs >= 1, "--jobs: expected a positive integer, got ", jobs);
  const experiments::SweepPlan plan = experiments::plan_sweep(a.require("--config"), a.all("--set"));
  if (a.has("--dry-run")) {
    std::printf("%s", experiments::describe_plan(plan).c_str());
    return 0;
  }
  experiments::SweepOptions options;
  options.jobs = static_cast<int>(jobs);
  if (a.has("--launcher")) options.launcher = a.require("--launcher");
  const nlohmann::json summary = experiments::run_sweep(plan, options);
  if (summary.contains("stopped_by_signal")) return train::kStoppedBySignal;  // re-run to resume
  for (const auto& point : summary["points"])
    if (point["status"] == "failed") return 1;
  return 0;
}

int report_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {
      {"--set", "KEY=VALUE", "",
       "a stability setting that replaces the runs' own, e.g. --set loss_margin=0.3 (repeatable; see `darkformer "
       "config-keys`, section stability)",
       true},
      kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer report SWEEP_DIR [--set KEY=VALUE]...\n"
                           "Writes SWEEP_DIR/report.md (tables from summary.json and the points' metrics, their stability\n"
                           "re-derived with the current rules) and PNG plots in SWEEP_DIR/plots/ (gnuplot).",
                     specs))
    return 0;
  std::vector<std::string> positional, flags;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) == 0) {
      flags.push_back(args[i]);
      if (i + 1 < args.size() && args[i].find('=') == std::string::npos) flags.push_back(args[++i]);
    } else {
      positional.push_back(args[i]);
    }
  }
  const Args a(flags, specs);
  DARK_CHECK(positional.size() == 1, "report: expected one argument, the sweep folder (darkformer report SWEEP_DIR)");
  experiments::ReportOptions options;
  options.stability_overrides = a.all("--set");
  const experiments::ReportResult r = experiments::write_report(positional[0], options);
  std::printf("wrote %s\n", r.markdown.c_str());
  if (!r.plotted) std::printf("no plots: %s\n", r.plot_note.c_str());
  return 0;
}

}  // namespace dark::cli
