// What `darkformer report` reads of a sweep folder: summary.json's points, each with its
// metrics.jsonl and its stability analysis re-derived with the current rules (and any
// stability overrides the report was given), grouped the way the tables and plots read them:
//   method  the values of the method axes (attention.kind, a *.trainable key, or an axis
//           named "method", a sweep's named variants), e.g. "performer" or "softmax/all";
//   group   the values of the other axes but the seed, e.g. "lr=1e-3" ("" when none);
//   seed    the value of the "seed" axis (sweep files' "seeds"), when there is one.
// Points that differ only in their seed are replicates of one (method, group) cell.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/metrics/run_metrics.h"
#include "train/metrics/stability.h"

namespace dark::experiments {

struct ReportPoint {
  nlohmann::json row;  // the summary row: name, dir, values, status, wall_s, ...
  metrics::RunMetrics metrics;
  metrics::StabilityReport stability;
  std::string method, group;
  std::optional<std::int64_t> seed;
  nlohmann::json transfer;  // the run's transfer.json (attention transfer, train/swap/transfer.h); null without one
  std::string name() const { return row["name"].get<std::string>(); }
};

struct ReportData {
  nlohmann::json summary;
  std::vector<std::string> axes, method_axes, group_axes;  // group_axes: the others but "seed"
  std::vector<std::string> methods, groups;                // distinct values, in grid order
  std::vector<std::int64_t> seeds;                         // distinct seeds, in grid order
  std::vector<ReportPoint> points;
  metrics::StabilityConfig detector;  // the spike rules the report applied (the first point's, overrides included)
  bool seeded() const { return seeds.size() >= 2; }
};

// Reads SWEEP_DIR/summary.json and every point's metrics (and transfer.json where it has one); `stability_overrides` ("window=30",
// "stability.loss_margin=0.3": keys of the stability section) replace the points' own settings.
ReportData load_report_data(const std::filesystem::path& sweep_dir, const std::vector<std::string>& stability_overrides);

// "optimizer.lr" -> "lr": the last part of a config key, as tables name an axis.
std::string axis_leaf(const std::string& key);

// "3e-3", "performer", "all,limited_attention": an axis value as tables show it.
std::string axis_value_text(const nlohmann::json& v);

}  // namespace dark::experiments
