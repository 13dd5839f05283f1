// MQAR recall accuracy (data.task mqar, data/mqar.h): over a validation set's scored targets,
// whether the model's top-1 next token after each query key is that key's value, split by
// the number of pairs of the sequence and by query-key distance (the query key's position
// minus its pair's), in buckets of doubling width:
//   1-16, 17-32, 33-64, 65-128, 129-256, 257-512, 513-1K, 1K-2K, 2K-4K, 4K+
// (1K-2K: 1025-2048). 33-64 ends where an exact window of 64 keys still holds the key itself;
// from 65-128 on only what the far field carries can answer.
//
// JSON form in metrics.jsonl ("mqar"; TensorBoard tags mqar/by_pairs/4/accuracy, ...):
//   {"accuracy": .., "queries": .., "correct": ..,
//    "by_pairs": {"4": {"accuracy": .., "queries": .., "correct": ..}, ...},
//    "by_distance": {"1-16": {...}, ...}}
// with only the distance buckets some query reached. The run folder's mqar.json, which sweep
// reports read, keeps their order in lists:
//   {"task": "mqar", "step": .., "accuracy": .., "queries": .., "correct": ..,
//    "by_pairs": [{"pairs": 4, "accuracy": .., "queries": .., "correct": ..}, ...],
//    "by_distance": [{"distance": "1-16", ...}, ...]}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/mqar.h"
#include "nn/model.h"
#include "train/dist/communicator.h"

namespace dark::train {

struct MqarCount {
  std::string name;  // the pairs count ("16") or the distance bucket ("65-128")
  std::int64_t queries = 0, correct = 0;
  double accuracy() const { return queries > 0 ? static_cast<double>(correct) / static_cast<double>(queries) : 0.0; }
};

struct MqarReport {
  MqarCount all{"all"};
  std::vector<MqarCount> by_pairs;     // data.mqar.pairs in their order
  std::vector<MqarCount> by_distance;  // the buckets reached, nearest first
};

// The bucket of a distance >= 1: its index in mqar_distance_buckets().
int mqar_distance_bucket(std::int64_t distance);
const std::vector<std::string>& mqar_distance_buckets();

// Over every sequence of `val`, in eval mode, without recording. With a communicator of
// several ranks (every rank calls it) rank r takes batches r, r + W, ... and the counts are
// summed: every rank gets the whole report.
MqarReport evaluate_mqar(nn::CausalLM& model, const data::MqarValidationSet& val, dist::Communicator* comm = nullptr);

nlohmann::json mqar_json(const MqarReport& report);
// mqar.json's form (above) of the report at `step`.
nlohmann::json mqar_file_json(const MqarReport& report, std::int64_t step);
// Lines "  pairs 16: 0.982 (491 / 500)", then the distance buckets, each line after `indent`.
std::string mqar_table(const MqarReport& report, const std::string& indent = "  ");

}  // namespace dark::train
