// Shared by the end-to-end training tests: a tiny byte-level run config over a generated
// corpus, and the per-step losses a run wrote to metrics.jsonl.
#pragma once
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "train/metrics/run_metrics.h"
#include "test_util.h"

namespace dark::train {

// A byte-level corpus of three files (so both splits have one) of regular pseudo-words.
inline nlohmann::json tiny_config(const dark::testing::TempDir& tmp, const std::string& run, int steps) {
  for (int i = 0; i < 3; ++i) dark::testing::write_text(tmp / ("corpus/doc" + std::to_string(i) + ".txt"), dark::testing::generated_text(400, i));
  nlohmann::json config = nlohmann::json::parse(R"({
    "model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
    "data": {"tokenizer": "byte", "seq_len": 32, "val_windows": 16, "val_fraction": 0.34},
    "optimizer": {"lr": 0.01},
    "schedule": {"warmup_steps": 5},
    "training": {"batch_size": 8, "eval_interval": 10, "eval_batches": 2, "checkpoint_interval": 10,
                 "log_interval": 10, "generate_tokens": 8},
    "seed": 3
  })");
  config.merge_patch({{"data", {{"sources", {tmp / "corpus"}}, {"dir", tmp / "data"}}},
                      {"output", {{"dir", tmp / run}}},
                      {"training", {{"steps", steps}}}});
  return config;
}

// The "loss" of every step line in metrics.jsonl, by step.
// A config that samples no text at the end.
inline nlohmann::json quiet(nlohmann::json config) {
  config["training"]["generate_tokens"] = 0;
  return config;
}

// A finetuning config over the same tiny corpus: no model section (it comes from the source).
inline nlohmann::json finetune_config(const dark::testing::TempDir& tmp, const std::string& run, int steps,
                                      const std::filesystem::path& init_from, const nlohmann::json& attention,
                                      const nlohmann::json& trainable) {
  nlohmann::json config = quiet(tiny_config(tmp, run, steps));
  config.erase("model");
  config["attention"] = attention;
  config["finetune"] = {{"init_from", init_from.string()}, {"trainable", trainable}};
  return config;
}

inline std::map<std::int64_t, double> losses(const std::filesystem::path& run) {
  std::map<std::int64_t, double> out;
  for (const metrics::StepRecord& s : metrics::read_metrics(run / "metrics.jsonl").steps)
    if (!std::isnan(s.loss)) out[s.step] = s.loss;
  return out;
}

}  // namespace dark::train
