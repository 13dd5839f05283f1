// Sweep planning (grid, names, per-point validation) and execution (child processes,
// status files, resume, summaries). See sweep.h.
#include "train/experiments/sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "train/experiments/child_process.h"
#include "train/experiments/report_recall.h"
#include "train/experiments/sweep_progress.h"
#include "train/formats/checkpoint.h"
#include "train/config.h"
#include "train/progress.h"
#include "train/run_lock.h"
#include "train/metrics/stability.h"
#include "train/stop_signal.h"
#include "train/swap/transfer_state.h"

namespace dark::experiments {
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------- planning

std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number()) return short_number(v.get<double>());
  if (v.is_array()) {
    std::string out;
    for (const json& item : v) out += (out.empty() ? "" : "-") + value_text(item);
    return out;
  }
  return v.dump();  // true, false, objects
}

std::string safe_name(const std::string& text) {
  std::string out;
  for (const char c : text) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '-';
  return out;
}

std::string point_name(const std::vector<std::pair<std::string, json>>& values, const json& name_keys) {
  std::string name;
  for (const auto& [key, value] : values) {
    std::string label = key.substr(key.rfind('.') + 1);
    if (name_keys.contains(key)) label = name_keys.at(key).get<std::string>();
    else if (value.is_string()) label = "";
    const std::string text = value_text(value);
    // "lr3e-3", but "trainable-all": a label runs into a number, a dash separates words.
    const bool joins = label.empty() || text.empty() || std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-';
    name += str(name.empty() ? "" : "_", safe_name(label + (joins ? "" : "-") + text));
  }
  return name.empty() ? "base" : name;
}

// Applies "key": value (a dotted config key) to a config document; errors name `where`.
void apply_setting(json& doc, const std::string& key, const json& value, const std::string& where) {
  try {
    train::apply_override(doc, key + "=" + value.dump());
  } catch (const Error& e) {
    throw Error(str(where, ": ", e.what()));
  }
}

}  // namespace

std::vector<std::string> launcher_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::string short_number(double value) {
  if (!std::isfinite(value)) return value != value ? "nan" : value > 0 ? "inf" : "-inf";
  char buf[64];
  // The fewest significant digits that read back as the same double.
  const auto shortest = [&](const char* format) {
    for (int precision = 0; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, format, precision, value);
      if (std::strtod(buf, nullptr) == value) break;
    }
    return std::string(buf);
  };
  const std::string plain = shortest("%.*g");
  std::string exp = shortest("%.*e");  // "3e-03": drop the "+" and leading zeros of the exponent
  const std::size_t e = exp.find('e');
  std::string digits = exp.substr(e + 1);
  const std::string sign = digits[0] == '-' ? "-" : "";
  digits = digits.substr(1);
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  exp = exp.substr(0, e) + (digits == "0" ? "" : "e" + sign + digits);
  return exp.size() < plain.size() ? exp : plain;
}

namespace {

using Where = std::function<std::string(const std::string& key)>;  // "sweep: FILE: KEY" for errors

struct Axes {
  std::vector<std::pair<std::string, json>> values;  // each axis and its values, in grid order
  std::map<std::string, std::map<std::string, json>> variants;  // named-variant axis -> label -> settings
};

// The axes in the file's order (nlohmann::json objects sort their keys; the file's order is
// the grid's), then "seeds", the replicates of every point, as the last axis ("seed"): points
// that differ only in it are the same experiment under another seed, and reports pair kinds
// by seed.
Axes read_axes(const nlohmann::ordered_json& sweep, const Where& where) {
  Axes axes;
  const nlohmann::ordered_json ordered = sweep.value("axes", nlohmann::ordered_json::object());
  for (const auto& [key, ordered_values] : ordered.items()) {
    json values = ordered_values;
    if (ordered_values.is_object()) {
      // Named variants: {"label": {"dotted.key": value, ...}, ...}; the point's value is the label.
      DARK_CHECK(!ordered_values.empty(), where("axes." + key), ": expected at least one named variant");
      values = json::array();
      for (const auto& [label, settings] : ordered_values.items()) {
        DARK_CHECK(settings.is_object(), where("axes." + key + "." + label),
                   ": expected an object of dotted config keys, got ", settings.dump());
        values.push_back(label);
        axes.variants[key][label] = settings;
      }
    }
    DARK_CHECK(values.is_array() && !values.empty(), where("axes." + key),
               ": expected a non-empty list of values or an object of named variants, got ", values.dump());
    axes.values.emplace_back(key, values);
  }
  if (sweep.contains("seeds")) {
    const json seeds = sweep["seeds"];
    DARK_CHECK(seeds.is_array() && !seeds.empty(), where("seeds"), ": expected a non-empty list of seeds, e.g. [0, 1, 2], got ",
               seeds.dump());
    std::set<std::int64_t> distinct_seeds;
    for (const json& seed : seeds) {
      DARK_CHECK(seed.is_number_integer() && seed.get<std::int64_t>() >= 0, where("seeds"),
                 ": expected non-negative integers, got ", seed.dump());
      DARK_CHECK(distinct_seeds.insert(seed.get<std::int64_t>()).second, where("seeds"), ": seed ", seed.dump(), " twice");
    }
    DARK_CHECK(!ordered.contains("seed"), where("seeds"), ": \"seed\" is also an axis; give the seeds in one place");
    axes.values.emplace_back("seed", seeds);
  }
  return axes;
}

// The grid's points, first axis slowest (`index` counts in mixed radix over the axes'
// lengths): each named, in its folder under `dir`, with `base` plus its settings as its
// config, which must parse.
std::vector<SweepPoint> grid_points(const Axes& axes, const json& base, const json& name_keys, const fs::path& dir,
                                    const Where& where) {
  std::size_t total = 1;
  for (const auto& [key, values] : axes.values) total *= values.size();
  std::vector<SweepPoint> points;
  std::map<std::string, std::size_t> names;
  for (std::size_t index = 0; index < total; ++index) {
    SweepPoint point;
    std::size_t rest = index;
    for (auto it = axes.values.rbegin(); it != axes.values.rend(); ++it) {
      point.values.emplace(point.values.begin(), it->first, it->second[rest % it->second.size()]);
      rest /= it->second.size();
    }
    point.name = point_name(point.values, name_keys);
    const auto [seen, fresh] = names.emplace(point.name, index);
    DARK_CHECK(fresh, where("axes"), ": points ", seen->second + 1, " and ", index + 1, " are both named \"", point.name,
               "\"; give the axes distinct labels with name_keys");
    point.dir = dir / point.name;
    point.config = base;
    for (const auto& [key, value] : point.values) {
      const auto variant = axes.variants.find(key);
      if (variant == axes.variants.end()) {
        apply_setting(point.config, key, value, where("axes." + key + " = " + value.dump()));
        continue;
      }
      const std::string label = value.get<std::string>();
      for (const auto& [setting, setting_value] : variant->second.at(label).items())
        apply_setting(point.config, setting, setting_value, where("axes." + key + "." + label + "." + setting));
    }
    apply_setting(point.config, "output.dir", point.dir.string(), where("output"));
    try {
      train::parse_config(point.config);
    } catch (const Error& e) {
      throw Error(str(where("point " + point.name), ": ", e.what()));
    }
    points.push_back(std::move(point));
  }
  return points;
}

}  // namespace

SweepPlan plan_sweep(const fs::path& sweep_file, const std::vector<std::string>& overrides) {
  const std::string file = sweep_file.string();
  nlohmann::ordered_json ordered_sweep;  // read once, depth-limited; its key order is the grid's
  try {
    ordered_sweep = train::read_ordered_config_json(sweep_file);
  } catch (const Error& e) {
    throw Error(str("sweep: ", e.what()));
  }
  const json sweep = ordered_sweep;
  const Where where = [&](const std::string& key) { return str("sweep: ", file, ": ", key); };
  DARK_CHECK(sweep.is_object(), "sweep: ", file, ": expected a JSON object");
  for (const auto& [key, value] : sweep.items()) {
    static const std::set<std::string> known = {"base", "set", "axes", "seeds", "output", "name_keys", "launcher"};
    DARK_CHECK(known.contains(key), where(key),
               ": unknown key (a sweep file has base, set, axes, seeds, output, name_keys, launcher)");
  }
  DARK_CHECK(sweep.contains("base") && sweep["base"].is_string(), where("base"),
             ": expected the path of a run config (relative to the sweep file)");
  const json set = sweep.value("set", json::object());
  const json axes = sweep.value("axes", json::object());
  const json name_keys = sweep.value("name_keys", json::object());
  DARK_CHECK(set.is_object(), where("set"), ": expected an object of dotted config keys, got ", set.dump());
  DARK_CHECK(axes.is_object(), where("axes"), ": expected an object mapping dotted config keys to lists of values");
  DARK_CHECK(name_keys.is_object(), where("name_keys"), ": expected an object mapping axis keys to labels");
  for (const auto& [key, label] : name_keys.items()) {
    DARK_CHECK(axes.contains(key), where("name_keys." + key), ": not an axis");
    DARK_CHECK(label.is_string(), where("name_keys." + key), ": expected a string label, got ", label.dump());
  }

  SweepPlan plan;
  plan.file = sweep_file;
  const fs::path base_path = sweep_file.parent_path() / sweep["base"].get<std::string>();
  json base;
  try {
    base = train::read_config_json(base_path);
  } catch (const Error& e) {
    throw Error(str(where("base"), ": ", e.what()));
  }
  for (const auto& [key, value] : set.items()) apply_setting(base, key, value, where("set." + key));
  for (const std::string& o : overrides) {
    try {
      train::apply_override(base, o);
    } catch (const Error& e) {
      throw Error(str("sweep: --set ", o, ": ", e.what()));
    }
  }
  plan.overrides = overrides;
  if (sweep.contains("launcher")) {
    DARK_CHECK(sweep["launcher"].is_string(), where("launcher"), ": expected a command, e.g. \"mpirun -np 2\", got ",
               sweep["launcher"].dump());
    plan.launcher = launcher_words(sweep["launcher"].get<std::string>());
  }
  if (sweep.contains("output")) {
    DARK_CHECK(sweep["output"].is_string() && !sweep["output"].get<std::string>().empty(), where("output"),
               ": expected a folder path");
    plan.dir = sweep["output"].get<std::string>();
  } else {
    plan.dir = fs::path("runs/sweeps") / sweep_file.stem();
  }

  const Axes grid = read_axes(ordered_sweep, where);
  for (const auto& [key, values] : grid.values) plan.axes.push_back(key);
  plan.points = grid_points(grid, base, name_keys, plan.dir, where);
  return plan;
}

namespace {

// ---------------------------------------------------------------- running

json read_json_file(const fs::path& path) {
  if (!fs::exists(path)) return nullptr;
  return json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
}

// A finished point is skipped on re-runs; failed and interrupted ones are trained again.
bool finished(const json& status) {
  return status.is_object() && (status.value("status", "") == "done" || status.value("status", "") == "diverged");
}

std::vector<std::string> last_lines(const fs::path& path, std::size_t count) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > count) lines.erase(lines.begin());
  }
  return lines;
}

// The environment of the children: the parent's, with OMP_NUM_THREADS sharing the cores
// among the jobs unless the user chose it or a launcher places the ranks.
std::vector<std::string> child_environment(int jobs, bool launched) {
  std::vector<std::string> env = current_environment();
  if (std::getenv("OMP_NUM_THREADS") == nullptr && !launched) {
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1, cores / std::max(1, jobs))));
  }
  return env;
}

// spawn, its errors prefixed "sweep: ".
pid_t start_child(const std::vector<std::string>& argv, const fs::path& log, const std::vector<std::string>& env) {
  try {
    return spawn(argv, log, env);
  } catch (const Error& e) {
    throw Error(str("sweep: ", e.what()));
  }
}

std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

json eval_json(const std::optional<metrics::EvalRecord>& e) {
  if (!e) return nullptr;
  return {{"step", e->step}, {"loss", e->loss}, {"perplexity", e->perplexity}, {"accuracy", e->accuracy}};
}

// The stability report of a point from its metrics.jsonl, under its own stability settings.
metrics::StabilityReport point_stability(const SweepPoint& point) {
  const metrics::RunMetrics m = metrics::read_metrics(point.dir / "metrics.jsonl");
  return metrics::analyze_stability(m, train::stability_options(train::parse_config(point.config)));
}

// A diverged run may still exit 0 (stability.stop_on_divergence) or not
// (training.max_consecutive_skips); either way it is a result of the sweep, not a failure.
// An interrupted one was stopped by a signal (it saved its step and exited with
// train::kStoppedBySignal, or ended after the sweep passed a signal on to it) and resumes on a re-run.
std::string point_status(const metrics::StabilityReport& s, int exit_code, bool interrupted) {
  return s.diverged ? "diverged" : exit_code == 0 ? "done" : interrupted || exit_code == train::kStoppedBySignal ? "interrupted" : "failed";
}

json summary_row(const SweepPoint& point, const json& status) {
  const metrics::StabilityReport s = point_stability(point);
  json values = json::object();
  for (const auto& [key, value] : point.values) values[key] = value;
  json spike_steps = json::array();
  for (const metrics::Spike& spike : s.loss_spikes) spike_steps.push_back(spike.step);
  const bool has_status = status.is_object();
  return {{"name", point.name},
          {"dir", point.dir.string()},
          {"values", values},
          // Re-derived from the metrics with the current rules, so a summary never keeps a label
          // an older rule gave.
          {"status", !has_status ? "not run"
                     : status.value("exit_code", json()).is_number_integer()
                         ? point_status(s, status["exit_code"].get<int>(), status.value("status", "") == "interrupted")
                         : status.value("status", "failed")},
          {"exit_code", has_status ? status.value("exit_code", json(nullptr)) : json(nullptr)},
          {"wall_s", has_status ? status.value("wall_s", json(nullptr)) : json(nullptr)},
          {"steps", s.steps},
          {"loss_spikes", s.loss_spikes.size()},
          {"loss_spike_steps", spike_steps},
          {"largest_loss_spike", s.largest_loss_spike ? json{{"step", s.largest_loss_spike->step}, {"ratio", s.largest_loss_spike->ratio}}
                                                      : json(nullptr)},
          {"grad_spikes", s.grad_spikes.size()},
          {"diverged", s.diverged},
          {"divergence_step", s.diverged ? json(s.divergence_step) : json(nullptr)},
          {"divergence_reason", s.divergence_reason},
          {"start_eval", eval_json(s.start_eval)},
          {"final_eval", eval_json(s.final_eval)},
          {"best_eval", eval_json(s.best_eval)}};
}

std::string csv_cell(const json& v) {
  std::string text = v.is_null() ? "" : v.is_string() ? v.get<std::string>() : v.is_number_float() ? short_number(v.get<double>()) : v.dump();
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string summary_csv(const std::vector<std::string>& axes, const json& rows) {
  std::string out = "name";
  for (const std::string& a : axes) out += str(",", csv_cell(a));
  out += ",status,exit_code,steps,loss_spikes,largest_spike_ratio,largest_spike_step,grad_spikes,diverged,"
         "divergence_step,final_val_loss,best_val_loss,final_perplexity,final_accuracy,best_accuracy,wall_s\n";
  const auto field = [](const json& object, const char* key) { return object.is_object() ? object.value(key, json(nullptr)) : json(nullptr); };
  for (const json& r : rows) {
    out += csv_cell(r["name"]);
    for (const std::string& a : axes) out += str(",", csv_cell(r["values"][a]));
    for (const json& v : {r["status"], r["exit_code"], r["steps"], r["loss_spikes"], field(r["largest_loss_spike"], "ratio"),
                          field(r["largest_loss_spike"], "step"), r["grad_spikes"], r["diverged"], r["divergence_step"],
                          field(r["final_eval"], "loss"), field(r["best_eval"], "loss"), field(r["final_eval"], "perplexity"),
                          field(r["final_eval"], "accuracy"), field(r["best_eval"], "accuracy"), r["wall_s"]})
      out += str(",", csv_cell(v));
    out += "\n";
  }
  return out;
}

// "done in 2m10s, val loss 4.12, acc 0.310, 0 spikes" and the like.
std::string outcome_text(const json& row, double seconds) {
  const std::string status = row["status"];
  std::string text = str(status, " in ", train::duration_text(seconds));
  if (status == "diverged") text += str(" at step ", row["divergence_step"].dump(), " (", row["divergence_reason"].get<std::string>(), ")");
  if (row["final_eval"].is_object()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ", val loss %.4g, acc %.3f", row["final_eval"]["loss"].get<double>(),
                  row["final_eval"]["accuracy"].get<double>());
    text += buf;
  }
  return text + str(", ", row["loss_spikes"].get<std::size_t>(), " spikes");
}

class SweepLog {
 public:
  explicit SweepLog(const fs::path& path) : out_(path, std::ios::app) {
    DARK_CHECK(out_.good(), "sweep: cannot open ", path.string(), " for writing");
  }
  void line(const std::string& text) {
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
    out_ << text << '\n' << std::flush;
  }

 private:
  std::ofstream out_;
};

// Waits until one of `children` (pid -> the signal already passed on to it, 0 for none) ends;
// returns its pid and wait status. A stop signal the sweep receives meanwhile is passed on to
// every child, once; `while_waiting` (if set) runs between polls.
std::pair<pid_t, int> wait_any(std::map<pid_t, int>& children, const std::function<void()>& while_waiting = {}) {
  for (;;) {
    if (while_waiting) while_waiting();
    if (const int sig = train::StopSignals::received()) {
      for (auto& [pid, sent] : children)
        if (!sent) ::kill(pid, sig), sent = sig;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    DARK_CHECK(pid >= 0 || errno == EINTR, "sweep: waitpid: ", std::strerror(errno));
    if (pid > 0 && children.contains(pid)) return {pid, status};
    if (pid <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polled: a signal never waits on a blocked call
  }
}

// Runs `darkformer prepare-data` once per distinct data folder, before the points: children
// running at once must not build the same token shards side by side (points of data.task
// mqar have none). False when a stop signal came first.
bool prepare_data(const SweepPlan& plan, const std::string& executable, const std::vector<std::string>& env, SweepLog& log) {
  std::set<std::string> done;
  for (const SweepPoint& p : plan.points) {
    const train::RunConfig config = train::parse_config(p.config);
    if (config.data.task == data::DataTask::mqar) continue;  // synthetic: no corpus to prepare
    if (!done.insert(config.data.dir).second) continue;
    fs::create_directories(p.dir);
    write_file_atomic(p.dir / "point_config.json", p.config.dump(2) + "\n");
    const fs::path log_path = plan.dir / "prepare-data.log";
    const pid_t pid = start_child({executable, "prepare-data", "--config", (p.dir / "point_config.json").string()}, log_path, env);
    std::map<pid_t, int> children = {{pid, 0}};
    const int status = wait_any(children).second;
    if (train::StopSignals::received()) return false;
    if (exit_code_of(status) != 0) {
      std::string tail;
      for (const std::string& l : last_lines(log_path, 5)) tail += "\n  " + l;
      throw Error(str("sweep: preparing the data of point ", p.name, " failed (exit code ", exit_code_of(status), "); see ",
                      log_path.string(), tail));
    }
    log.line(str("data ready: ", train::parse_config(p.config).data.dir));
  }
  return true;
}

}  // namespace

std::string describe_plan(const SweepPlan& plan) {
  std::string out = str(plan.points.size(), " point(s) in ", plan.dir.string(), "\n");
  if (!plan.overrides.empty()) out += str("every point with --set: ", join_words(plan.overrides), "\n");
  if (!plan.launcher.empty()) out += str("each point trains under: ", join_words(plan.launcher), "\n");
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    const SweepPoint& p = plan.points[i];
    const json status = read_json_file(p.dir / "status.json");
    std::string action = "train";
    if (finished(status)) action = "skip (" + status.value("status", "") + ")";
    else if (const auto ck = formats::latest_checkpoint(p.dir)) action = "resume from " + ck->filename().string();
    else if (train::transfer_in_progress(p.dir)) action = "resume its attention transfer";
    std::string values;
    for (const auto& [key, value] : p.values) values += str(values.empty() ? "" : ", ", key, "=", value.dump());
    out += str("  [", i + 1, "/", plan.points.size(), "] ", p.name, ": ", values, " -> ", action, "\n");
  }
  return out;
}

namespace {
// Writes the point's config and starts its training (resuming from its latest checkpoint),
// under the launcher if any; returns the child's pid.
pid_t start_point(const SweepPoint& p, const std::vector<std::string>& launcher, const std::string& executable,
                  const std::vector<std::string>& env, SweepLog& log);
// Writes the status.json of a point whose child ended and logs its outcome; `completed`
// (points ended, of `total`) counts it unless it was interrupted.
void record_point_end(const SweepPoint& p, int exit_code, bool passed_a_signal, double seconds,
                      std::size_t& completed, std::size_t total, SweepLog& log);
// summary.json and summary.csv of every point (and of an earlier sweep's in the same folder)
// and the closing log line; returns the summary.
json write_summary(const SweepPlan& plan, SweepLog& log);
}  // namespace

json run_sweep(const SweepPlan& plan, const SweepOptions& options) {
  const train::RunLock lock(plan.dir, "sweep folder");  // one sweep per folder; its points lock their own
  const train::StopSignals signals;                     // SIGTERM / SIGINT: stop the points, record them
  SweepLog log(plan.dir / "sweep.log");
  const std::vector<std::string> launcher =
      options.launcher.empty() ? plan.launcher : launcher_words(options.launcher);
  const std::vector<std::string> env = child_environment(options.jobs, !launcher.empty());
  // The children run the program under its real path, so that ps and top show `darkformer
  // train` (and a launcher, which cannot run "/proc/self/exe" of its own, finds it).
  const std::string executable = fs::canonical(options.executable).string();
  log.line(str("sweep ", plan.file.string(), ": ", plan.points.size(), " point(s), ", options.jobs, " at a time, in ",
               plan.dir.string(), launcher.empty() ? "" : ", each under: " + join_words(launcher)));

  std::vector<std::size_t> unfinished;  // point indices still to train, in grid order
  std::size_t completed = 0;
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    const json status = read_json_file(plan.points[i].dir / "status.json");
    if (!finished(status)) {
      unfinished.push_back(i);
      continue;
    }
    ++completed;
    log.line(str("[", completed, "/", plan.points.size(), "] ", plan.points[i].name, ": already ",
                 status.value("status", ""), ", skipped"));
  }
  if (!unfinished.empty() && !prepare_data(plan, executable, env, log)) unfinished.clear();
  SweepProgress progress(plan.points.size(), completed, options.jobs);
  const auto print_progress = [&] {
    for (const std::string& line : progress.poll()) log.line(line);
  };

  struct Running {
    std::size_t index;
    Clock::time_point start;
  };
  std::map<pid_t, Running> running;
  std::map<pid_t, int> children;  // the same pids, with the signal passed on to each
  std::size_t next = 0;
  while (next < unfinished.size() || !running.empty()) {
    while (!train::StopSignals::received() && next < unfinished.size() &&
           running.size() < static_cast<std::size_t>(std::max(1, options.jobs))) {
      const std::size_t index = unfinished[next++];
      const pid_t pid = start_point(plan.points[index], launcher, executable, env, log);
      running[pid] = {index, Clock::now()};
      children[pid] = 0;
      progress.started(pid, plan.points[index].name, plan.points[index].dir / "train.log");
    }
    if (running.empty()) break;  // stopped before the next point
    const auto [pid, wait_status] = wait_any(children, print_progress);
    progress.ended(pid);
    const auto it = running.find(pid);
    const SweepPoint& p = plan.points[it->second.index];
    const double seconds = std::chrono::duration<double>(Clock::now() - it->second.start).count();
    const int forwarded = children[pid];
    running.erase(it);
    children.erase(pid);

    record_point_end(p, exit_code_of(wait_status), forwarded != 0, seconds, completed, plan.points.size(), log);
  }
  return write_summary(plan, log);
}

namespace {

pid_t start_point(const SweepPoint& p, const std::vector<std::string>& launcher, const std::string& executable,
                  const std::vector<std::string>& env, SweepLog& log) {
  fs::create_directories(p.dir);
  write_file_atomic(p.dir / "point_config.json", p.config.dump(2) + "\n");
  std::vector<std::string> argv = launcher;
  for (const std::string& word :
       {executable, std::string("train"), std::string("--config"), (p.dir / "point_config.json").string()})
    argv.push_back(word);
  const auto checkpoint = formats::latest_checkpoint(p.dir);
  const bool transfer = !checkpoint && train::transfer_in_progress(p.dir);
  if (checkpoint || transfer) argv.push_back("--resume");
  std::ofstream(p.dir / "train.log", std::ios::app)
      << "==== sweep: "
      << (checkpoint ? "resuming from " + checkpoint->filename().string() : transfer ? "resuming its attention transfer" : "starting")
      << " ====\n";
  const pid_t pid = start_child(argv, p.dir / "train.log", env);
  log.line(str("start ", p.name, checkpoint ? " (resuming from " + checkpoint->filename().string() + ")" : ""));
  return pid;
}

void record_point_end(const SweepPoint& p, int exit_code, bool passed_a_signal, double seconds,
                      std::size_t& completed, std::size_t total, SweepLog& log) {
  // Whatever a point that was passed a signal exits with, the signal ended it: mpirun, for
  // one, exits 1 after stopping its ranks.
  const std::string status = point_status(point_stability(p), exit_code, passed_a_signal);
  json record = {{"status", status}, {"exit_code", exit_code}, {"wall_s", seconds}};
  if (exit_code != 0) record["log_tail"] = last_lines(p.dir / "train.log", 10);
  write_file_atomic(p.dir / "status.json", record.dump(2) + "\n");
  if (status != "interrupted") ++completed;
  const std::string counter = status == "interrupted" ? "" : str("[", completed, "/", total, "] ");
  std::string line = str(counter, p.name, ": ", outcome_text(summary_row(p, record), seconds));
  if (status == "failed") {
    line += str(" (exit code ", exit_code, "; see ", (p.dir / "train.log").string(), ")");
    for (const std::string& l : last_lines(p.dir / "train.log", 3)) line += "\n    " + l;
  }
  log.line(line);
}

json write_summary(const SweepPlan& plan, SweepLog& log) {
  json rows = json::array();
  for (const SweepPoint& p : plan.points) {
    rows.push_back(summary_row(p, read_json_file(p.dir / "status.json")));
    rows.back().update(recall_summary(p.dir));  // passkey and copy results, null without them
  }
  // A second sweep file may extend a folder with more points on the same axes (more seeds at
  // chosen points, say): the rows of the earlier ones stay in the summary.
  const json earlier = read_json_file(plan.dir / "summary.json");
  if (earlier.is_object() && earlier.value("axes", json()) == json(plan.axes) && earlier["points"].is_array()) {
    std::set<std::string> mine;
    for (const SweepPoint& p : plan.points) mine.insert(p.name);
    for (const json& r : earlier["points"])
      if (r.is_object() && r["name"].is_string() && !mine.contains(r["name"].get<std::string>()) && r["dir"].is_string() &&
          fs::exists(fs::path(r["dir"].get<std::string>()) / "metrics.jsonl"))
        rows.push_back(r);
  }
  const int stop = train::StopSignals::received();
  json summary = {{"sweep_file", plan.file.string()}, {"axes", plan.axes}, {"points", rows}};
  if (stop) summary["stopped_by_signal"] = stop == SIGINT ? "SIGINT" : "SIGTERM";
  write_file_atomic(plan.dir / "summary.json", summary.dump(2) + "\n");
  write_file_atomic(plan.dir / "summary.csv", summary_csv(plan.axes, rows));
  std::map<std::string, int> counts;
  for (const json& r : rows) counts[r["status"].get<std::string>()]++;
  std::string tally = str(counts["done"], " done, ", counts["diverged"], " diverged, ", counts["failed"], " failed");
  for (const char* other : {"interrupted", "not run"})
    if (counts[other]) tally += str(", ", counts[other], " ", other);
  log.line(str(stop ? "sweep stopped by signal: " : "sweep finished: ", tally, "; summary in ",
               (plan.dir / "summary.csv").string(), stop ? "; run the sweep again to resume" : ""));
  return summary;
}

}  // namespace

}  // namespace dark::experiments
