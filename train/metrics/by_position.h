// Loss and accuracy by distance: an evaluation's next-token numbers split by how much context
// each prediction had. A window's token at 0-based input position t is predicted from t + 1
// tokens; the buckets are ranges of that context length:
//   1-64, 65-256, 257-1K (257-1024), 1K-4K (1025-4096), 4K+ (4097 and up).
// An exact window of 64 keys covers the whole context of the first bucket; past it the random
// features carry the far keys, so the later buckets are where the kinds can differ.
//
// Their JSON form, in metrics.jsonl (and so the TensorBoard tags eval_by_position/1-64/loss):
//   {"1-64": {"loss": .., "accuracy": .., "tokens": ..}, "65-256": {...}, ...}
// holds only the buckets some position reached (a window of 128 tokens has no "257-1K"); a
// bucket no position reaches is absent, never zero.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dark::metrics {

struct PositionBucket {
  const char* name;
  std::int64_t first, last;  // context lengths t + 1, inclusive; last = INT64_MAX for the open one
};
// The five buckets, nearest first.
const std::vector<PositionBucket>& position_buckets();

struct BucketMetrics {
  std::string bucket;  // a PositionBucket's name
  double loss = 0, accuracy = 0;
  std::int64_t tokens = 0;
};
using ByPosition = std::vector<BucketMetrics>;  // the buckets reached, nearest first

// Per-position sums over an evaluation (index t = input position t: the summed losses, the
// correct top-1 predictions, the predicted tokens) -> the buckets with tokens, each summed in
// position order in float64.
ByPosition bucket_positions(const std::vector<double>& loss_sums, const std::vector<double>& hit_sums,
                            const std::vector<double>& token_counts);

// A plain-text table, one line per bucket ("context | loss | perplexity | accuracy | tokens"),
// each line starting with `indent`; `reference` (the unablated evaluation's buckets, or
// empty) adds each bucket's loss difference to it.
std::string by_position_table(const ByPosition& buckets, const std::string& indent = "  ",
                              const ByPosition& reference = {});

nlohmann::json by_position_json(const ByPosition& buckets);
// The form above back; buckets not in the table, or not objects, are an error naming them.
ByPosition by_position_from_json(const nlohmann::json& object);

}  // namespace dark::metrics
