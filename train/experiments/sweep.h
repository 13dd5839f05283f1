// `darkformer sweep`: trains every point of a grid of config overrides, each as a child
// process of the same binary, and summarises their stability and validation metrics.
//
// Sweep file (JSON, comments allowed):
//   {
//     "base": "../quickstart.json",     // run config; relative to the sweep file's folder
//     "set":  {"training.steps": 300},  // dotted keys applied to every point
//     "axes": {"attention.kind": ["softmax", "performer"],   // the grid: the cartesian product,
//              "optimizer.lr": [1e-3, 3e-3]},                // first axis slowest
//     "seeds": [0, 1, 2],               // optional: replicates, the last axis ("seed")
//     "output": "runs/sweeps/lr",       // sweep folder; default runs/sweeps/<sweep file stem>
//     "name_keys": {"optimizer.lr": "lr"},  // optional labels in point names (see below)
//     "launcher": "mpirun -np 2"        // optional: each point trains on several ranks
//   }
// An axis may also be an object of named variants, each a set of dotted keys, for settings that
// change together: "method": {"performer": {"attention.kind": "performer"}, "darkformer-whiten":
// {"attention.kind": "darkformer", "attention.darkformer.init": "whiten"}}; a point's value on
// it is the label. Reports take an axis named "method" as the method (train/experiments/report.h).
// "seeds" adds the axis "seed" last: the points that differ only in it are replicates, and
// reports give their mean and spread and pair methods by seed (same seed = same data order and
// initial weights).
// Paths inside the configs (data, output) stay relative to the working directory, as for
// `darkformer train`. Each point's output.dir is <sweep folder>/<point name>.
// launcher (or --launcher, which wins): a command the point's `darkformer train` is run
// under, split at spaces (no quoting): "mpirun -np 2" trains each point on two ranks (README
// "Scaling out"). The sweep then leaves OMP_NUM_THREADS to the user and the launcher, which
// binds each rank to its cores.
//
// Point names join one part per axis with "_": a string value alone ("performer"), other
// values after a label (the key's last segment, or name_keys[key]; "" = the value alone):
// "performer_lr3e-3". Numbers take their shortest spelling, characters outside [A-Za-z0-9.-]
// become "-". Two points with the same name are an error.
//
// Sweep folder:
//   sweep.log                      the progress lines of every invocation
//   prepare-data.log               output of the data preparation run before the points
//   summary.json, summary.csv      one row per point (written at the end of every invocation);
//                                  rows of points another sweep file trained into the folder
//                                  on the same axes are kept after this file's rows
//   <point>/point_config.json      the point's config document (base + set + axis values)
//   <point>/train.log              the child's stdout and stderr
//   .lock                          the running sweep's "pid host" (train/run_lock.h)
//   <point>/status.json            written when the child ends: {"status": "done" | "diverged"
//                                  | "failed" | "interrupted", "exit_code", "wall_s", "log_tail"}; a point whose
//                                  status is done or diverged is finished and skipped when the
//                                  sweep runs again; failed and interrupted points run again,
//                                  resumed (--resume) from their latest checkpoint when they have one
//   <point>/...                    the run folder (config.json, metrics.jsonl, stability.json, ...)
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace dark::experiments {

struct SweepPoint {
  std::string name;                                             // folder name below the sweep folder
  std::vector<std::pair<std::string, nlohmann::json>> values;  // axis key -> value, in axis order
  nlohmann::json config;                                        // config document, output.dir set
  std::filesystem::path dir;
};

struct SweepPlan {
  std::filesystem::path file;  // the sweep file
  std::vector<std::string> overrides;  // sweep --set, applied to every point
  std::filesystem::path dir;   // the sweep folder
  std::vector<std::string> launcher;  // the launcher's words ("mpirun", "-np", "2"); empty = none
  std::vector<std::string> axes;
  std::vector<SweepPoint> points;
};

// Reads a sweep file and builds every point, checking each point's config (unknown keys, bad
// values, cross-field rules) before anything runs. Errors start "sweep: FILE: KEY: ...".
// overrides: "KEY=VALUE" settings (`sweep --set`) applied to every point after the file's
// "set" and before the axes, as `train --set` applies them to one config.
SweepPlan plan_sweep(const std::filesystem::path& sweep_file, const std::vector<std::string>& overrides = {});

// "3e-3" for 0.003, "64" for 64, "0.5" for 0.5: the shortest spelling that reads back exactly.
std::string short_number(double value);

struct SweepOptions {
  int jobs = 1;                              // points trained at once
  std::string executable = "/proc/self/exe";  // the darkformer binary the children run (under its real path)
  std::string launcher;                      // overrides the plan's launcher when not empty
};

// A launcher's words: the text split at runs of spaces and tabs.
std::vector<std::string> launcher_words(const std::string& text);

// Trains the unfinished points (progress lines on stdout and in sweep.log), then writes
// summary.json and summary.csv; returns the summary. Throws only when the sweep itself cannot
// go on (its folder is in use by another sweep, data preparation fails, a folder cannot be
// written); a point that fails is recorded.
// The sweep holds its folder's lock (train/run_lock.h) while it runs; each point's train
// process holds the point's. The points end with the sweep however it ends (they get SIGTERM
// when it dies: a point saves its step and exits 75). On SIGTERM or SIGINT the sweep starts
// no more points, passes the signal on to the running ones, waits for them, records them as
// interrupted and returns a summary with "stopped_by_signal" (`darkformer sweep` exits 75);
// running the sweep again resumes them.
nlohmann::json run_sweep(const SweepPlan& plan, const SweepOptions& options);

// The plan as text for --dry-run: each point's name, values, folder and what a run would do.
std::string describe_plan(const SweepPlan& plan);

}  // namespace dark::experiments
