// Loading a sweep's points for its report (see report_data.h).
#include "train/experiments/report_data.h"

#include <algorithm>

#include "core/error.h"
#include "core/file_io.h"
#include "train/config.h"
#include "train/experiments/sweep.h"

namespace dark::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_method_axis(const std::string& axis) {
  return axis == "attention.kind" || axis_leaf(axis) == "trainable" || axis == "method";
}

// The point's config document: point_config.json as the sweep wrote it (config.json of the
// run folder, for a folder from before it did); null when neither is readable.
json point_config(const fs::path& dir) {
  for (const char* file : {"point_config.json", "config.json"})
    if (fs::exists(dir / file)) return train::read_config_json(dir / file);
  return nullptr;
}

template <class T>
void add_distinct(std::vector<T>& list, const T& value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

}  // namespace

std::string axis_leaf(const std::string& key) { return key.substr(key.rfind('.') + 1); }

std::string axis_value_text(const json& v) {
  if (v.is_null()) return "–";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return short_number(v.get<double>());
  if (v.is_array()) {
    std::string out;
    for (const json& item : v) out += (out.empty() ? "" : ",") + axis_value_text(item);
    return out;
  }
  return v.dump();
}

ReportData load_report_data(const fs::path& sweep_dir, const std::vector<std::string>& stability_overrides) {
  const fs::path summary_path = sweep_dir / "summary.json";
  DARK_CHECK(fs::exists(summary_path), "report: ", summary_path.string(), " not found (run `darkformer sweep` first)");
  ReportData d;
  d.summary = json::parse(read_file(summary_path), nullptr, /*allow_exceptions=*/false);
  DARK_CHECK(d.summary.is_object() && d.summary["points"].is_array() && d.summary["axes"].is_array(), "report: ",
             summary_path.string(), ": not a sweep summary (expected \"axes\" and \"points\")");
  d.axes = d.summary["axes"].get<std::vector<std::string>>();
  for (const std::string& a : d.axes) {
    if (is_method_axis(a)) d.method_axes.push_back(a);
    else if (a != "seed") d.group_axes.push_back(a);
  }
  // The overrides, checked once against the schema: "window=30" means "stability.window=30".
  std::vector<std::string> overrides;
  for (const std::string& o : stability_overrides) {
    const std::string assignment = o.rfind("stability.", 0) == 0 ? o : "stability." + o;
    DARK_CHECK(assignment.find('=') != std::string::npos, "report: --set ", o, ": expected KEY=VALUE, e.g. loss_margin=0.3");
    try {  // on its own first, so that a bad value is named as the report's, not a point's
      json doc = json::object();
      train::apply_override(doc, assignment);
      train::parse_config(doc);
    } catch (const Error& e) {
      throw Error(str("report: --set ", assignment, ": ", e.what()));
    }
    overrides.push_back(assignment);
  }
  bool first = true;
  for (const json& row : d.summary["points"]) {
    ReportPoint p;
    p.row = row;
    const fs::path dir = row.value("dir", "");
    json doc = point_config(dir);
    if (doc.is_null()) doc = json::object();
    for (const std::string& o : overrides) train::apply_override(doc, o);
    train::RunConfig config;
    try {
      config = train::parse_config(doc);
    } catch (const Error& e) {
      throw Error(str("report: point ", row.value("name", "?"), " (", dir.string(), "): ", e.what()));
    }
    if (first) d.detector = config.stability, first = false;
    p.metrics = metrics::read_metrics(dir / "metrics.jsonl");
    p.stability = metrics::analyze_stability(p.metrics, train::stability_options(config));
    if (fs::exists(dir / "transfer.json")) {
      p.transfer = json::parse(read_file(dir / "transfer.json"), nullptr, /*allow_exceptions=*/false);
      DARK_CHECK(p.transfer.is_object(), "report: ", (dir / "transfer.json").string(), ": not a transfer report (a JSON object)");
    }
    for (const std::string& a : d.method_axes) p.method += (p.method.empty() ? "" : "/") + axis_value_text(row["values"][a]);
    for (const std::string& a : d.group_axes)
      p.group += str(p.group.empty() ? "" : ", ", axis_leaf(a), "=", axis_value_text(row["values"][a]));
    if (const json& s = row["values"]["seed"]; s.is_number_integer()) p.seed = s.get<std::int64_t>();
    if (p.method.empty()) p.method = "all points";
    add_distinct(d.methods, p.method);
    add_distinct(d.groups, p.group);
    if (p.seed) add_distinct(d.seeds, *p.seed);
    d.points.push_back(std::move(p));
  }
  return d;
}

}  // namespace dark::experiments
