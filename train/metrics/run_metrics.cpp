// Reading and writing the records of metrics.jsonl (see run_metrics.h).
#include "train/metrics/run_metrics.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <string>

#include "core/error.h"
#include "train/metrics/json_number.h"

namespace dark::metrics {
namespace {

using nlohmann::json;

// A JSON number, or NaN for null / absent (non-finite values are written as null).
double number_or_nan(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : kNaN;
}

}  // namespace

bool RunMetrics::add(const json& line) {
  if (!line.is_object() || !line.contains("step") || !line.at("step").is_number_integer()) return false;
  const std::int64_t step = line.at("step").get<std::int64_t>();
  if (line.contains("eval_loss")) {
    EvalRecord e;
    e.step = step;
    e.loss = number_or_nan(line, "eval_loss");
    e.perplexity = number_or_nan(line, "eval_perplexity");
    e.accuracy = number_or_nan(line, "eval_accuracy");
    if (const auto b = line.find("eval_by_position"); b != line.end()) e.by_position = by_position_from_json(*b);
    if (const auto a = line.find("eval_ablation"); a != line.end() && a->is_object())
      for (const auto& [name, m] : a->items())
        if (m.is_object())
          e.ablations.push_back({name, number_or_nan(m, "loss"), number_or_nan(m, "perplexity"), number_or_nan(m, "accuracy"),
                                 m.contains("by_position") ? by_position_from_json(m.at("by_position")) : ByPosition()});
    evals.push_back(std::move(e));
    return false;
  }
  if (const auto r = line.find("redraw"); r != line.end() && r->is_object()) {
    redraws.push_back({step, number_or_nan(*r, "held_out_loss_before"), number_or_nan(*r, "held_out_loss_after")});
    return false;
  }
  if (!line.contains("loss") && !line.contains("skipped")) return false;
  steps.push_back({step, number_or_nan(line, "loss"), number_or_nan(line, "grad_norm"), line.value("skipped", false)});
  if (const auto a = line.find("attention_stats"); a != line.end() && a->is_array()) {
    AttentionStatsRecord record{step, {}};
    for (const json& layer : *a)
      if (layer.is_object())
        record.layers.push_back({number_or_nan(layer, "sq_norm_p50"), number_or_nan(layer, "sq_norm_p99"),
                                 number_or_nan(layer, "logit_sd_p50"), number_or_nan(layer, "logit_sd_p99")});
    attention.push_back(std::move(record));
  }
  return true;
}

RunMetrics read_metrics(const std::filesystem::path& metrics_jsonl) {
  RunMetrics m;
  std::ifstream in(metrics_jsonl);
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    DARK_CHECK(!j.is_discarded(), metrics_jsonl.string(), ":", number, ": not a JSON object");
    m.add(j);
  }
  return m;
}

json attention_stats_json(const std::vector<nn::AttentionStats>& layers) {
  json out = json::array();
  for (const nn::AttentionStats& s : layers)
    out.push_back({{"sq_norm_p50", finite_or_null(s.sq_norm_p50)},
                   {"sq_norm_p99", finite_or_null(s.sq_norm_p99)},
                   {"logit_sd_p50", finite_or_null(s.logit_sd_p50)},
                   {"logit_sd_p99", finite_or_null(s.logit_sd_p99)}});
  return out;
}

json redraw_json(std::int64_t feature_epoch, double held_out_before, double held_out_after, std::int64_t held_out_tokens) {
  json r = {{"feature_epoch", feature_epoch}};
  if (held_out_tokens > 0) {
    r["held_out_loss_before"] = finite_or_null(held_out_before);
    r["held_out_loss_after"] = finite_or_null(held_out_after);
    r["held_out_tokens"] = held_out_tokens;
  }
  return r;
}

}  // namespace dark::metrics
