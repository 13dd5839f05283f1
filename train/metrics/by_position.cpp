// Loss and accuracy by position bucket (see by_position.h).
#include "train/metrics/by_position.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "train/metrics/json_number.h"

namespace dark::metrics {

const std::vector<PositionBucket>& position_buckets() {
  static const std::vector<PositionBucket> buckets = {{"1-64", 1, 64},
                                                      {"65-256", 65, 256},
                                                      {"257-1K", 257, 1024},
                                                      {"1K-4K", 1025, 4096},
                                                      {"4K+", 4097, std::numeric_limits<std::int64_t>::max()}};
  return buckets;
}

ByPosition bucket_positions(const std::vector<double>& loss_sums, const std::vector<double>& hit_sums,
                            const std::vector<double>& token_counts) {
  DARK_CHECK(loss_sums.size() == hit_sums.size() && loss_sums.size() == token_counts.size(),
             "bucket_positions: ", loss_sums.size(), " loss sums, ", hit_sums.size(), " hit sums and ",
             token_counts.size(), " token counts: expected one of each per position");
  const auto positions = static_cast<std::int64_t>(loss_sums.size());
  ByPosition out;
  for (const PositionBucket& b : position_buckets()) {
    double loss = 0, hits = 0, tokens = 0;
    // Position t has context length t + 1.
    for (std::int64_t t = b.first - 1; t < positions && t + 1 <= b.last; ++t) {
      loss += loss_sums[t];
      hits += hit_sums[t];
      tokens += token_counts[t];
    }
    if (tokens > 0) out.push_back({b.name, loss / tokens, hits / tokens, static_cast<std::int64_t>(tokens)});
  }
  return out;
}

std::string by_position_table(const ByPosition& buckets, const std::string& indent, const ByPosition& reference) {
  const bool compared = !reference.empty();
  std::string out = indent + "context  |   loss   | perplexity | accuracy |  tokens" + (compared ? " | loss change" : "") + "\n";
  for (const BucketMetrics& b : buckets) {
    char line[160];
    std::snprintf(line, sizeof line, "%-8s | %8.4f | %10.2f | %8.4f | %7lld", b.bucket.c_str(), b.loss, std::exp(b.loss),
                  b.accuracy, static_cast<long long>(b.tokens));
    out += indent + line;
    if (compared) {
      const auto same = std::find_if(reference.begin(), reference.end(), [&](const BucketMetrics& r) { return r.bucket == b.bucket; });
      if (same != reference.end()) {
        std::snprintf(line, sizeof line, " | %+11.4f", b.loss - same->loss);
        out += line;
      }
    }
    out += "\n";
  }
  return out;
}

nlohmann::json by_position_json(const ByPosition& buckets) {
  nlohmann::json out = nlohmann::json::object();
  for (const BucketMetrics& b : buckets)
    out[b.bucket] = {{"loss", finite_or_null(b.loss)}, {"accuracy", finite_or_null(b.accuracy)}, {"tokens", b.tokens}};
  return out;
}

ByPosition by_position_from_json(const nlohmann::json& object) {
  DARK_CHECK(object.is_object(), "by-position metrics: expected an object of buckets, got ", object.dump());
  for (const auto& [name, value] : object.items()) {
    const auto& all = position_buckets();
    DARK_CHECK(std::any_of(all.begin(), all.end(), [&](const PositionBucket& b) { return name == b.name; }),
               "by-position metrics: unknown bucket \"", name, "\" (expected 1-64, 65-256, 257-1K, 1K-4K, 4K+)");
    DARK_CHECK(value.is_object(), "by-position metrics: bucket \"", name, "\" is not an object: ", value.dump());
  }
  ByPosition out;
  const auto number = [](const nlohmann::json& o, const char* key) {
    const auto it = o.find(key);
    return it != o.end() && it->is_number() ? it->get<double>() : kNaN;
  };
  for (const PositionBucket& b : position_buckets()) {  // nearest first, whatever the file's key order
    const auto it = object.find(b.name);
    if (it == object.end()) continue;
    out.push_back({b.name, number(*it, "loss"), number(*it, "accuracy"), it->value("tokens", std::int64_t{0})});
  }
  return out;
}

}  // namespace dark::metrics
