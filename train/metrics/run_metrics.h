// The records of a run's metrics.jsonl, as the analyses read them (train/metrics/stability.h,
// train/metrics/redraw_shock.h, reports): optimizer steps (with, on log steps, each layer's attention
// statistics), evaluations and random-feature redraws. Lines of other kinds are ignored.
//
// The lines (one JSON object each; non-finite numbers are written as null):
//   step       {"step", "loss", "lr", "grad_norm", ..., "attention_stats": [per layer: {"sq_norm_p50",
//              "sq_norm_p99", "logit_sd_p50", "logit_sd_p99"}] (log steps only)}, or
//              {"step", "skipped": true, "loss"}
//   eval       {"step", "eval_loss", "eval_perplexity", "eval_accuracy", "eval_tokens",
//              "eval_by_position": {bucket: {"loss", "accuracy", "tokens"}} (train/metrics/by_position.h),
//              and on a final evaluation with evaluation.ablation "eval_ablation": {"window_only" /
//              "features_only": {"loss", "perplexity", "accuracy", "tokens", "by_position"}}
//              (train/ablation.h)}; lines from before the buckets have neither
//   redraw     {"step", "redraw": {"feature_epoch", "held_out_loss_before", "held_out_loss_after",
//              "held_out_tokens"}}: step is the first optimizer step trained with the new
//              features; the held-out numbers (the same validation batches, weights fixed,
//              with the old features and the new) are absent when stability.redraw_eval_batches = 0
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "nn/attention_kernel.h"
#include "train/metrics/by_position.h"

namespace dark::metrics {

// One optimizer step as metrics.jsonl records it. A skipped step has no usable grad_norm.
struct StepRecord {
  std::int64_t step = 0;  // 1-based
  double loss = 0;        // NaN when the loss was not finite
  double grad_norm = 0;   // NaN when unknown (skipped steps)
  bool skipped = false;
};
// An evaluation of the same windows with one part of the exact-window layers switched off.
struct AblationRecord {
  std::string name;  // window_only, features_only
  double loss = 0, perplexity = 0, accuracy = 0;
  ByPosition by_position;
};
struct EvalRecord {
  std::int64_t step = 0;
  double loss = 0, perplexity = 0, accuracy = 0;
  ByPosition by_position;               // empty in lines from before the buckets
  std::vector<AblationRecord> ablations;  // in the line's order; empty without evaluation.ablation
};
struct RedrawRecord {
  std::int64_t step = 0;  // the first step with the new features
  double held_out_before = 0, held_out_after = 0;  // NaN when not measured
};
struct AttentionStatsRecord {
  std::int64_t step = 0;
  std::vector<nn::AttentionStats> layers;  // NaN fields where a kind has no such quantity
};

struct RunMetrics {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::vector<RedrawRecord> redraws;
  std::vector<AttentionStatsRecord> attention;
  // Adds one metrics.jsonl object; returns true when it was a step record.
  bool add(const nlohmann::json& line);
};
// A metrics.jsonl (missing file = none); a malformed line is an error naming the file and line.
RunMetrics read_metrics(const std::filesystem::path& metrics_jsonl);

// The metrics lines of attention statistics and of a redraw, as the trainer writes them.
nlohmann::json attention_stats_json(const std::vector<nn::AttentionStats>& layers);
nlohmann::json redraw_json(std::int64_t feature_epoch, double held_out_before, double held_out_after,
                           std::int64_t held_out_tokens);

}  // namespace dark::metrics
