// Document boundaries of a shard and their length distribution (see documents.h).
#include "data/documents.h"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace dark::data {
namespace {

constexpr std::int64_t kScanChunk = 1 << 16;  // tokens read per call

std::int64_t nearest_rank(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto n = static_cast<double>(sorted.size());
  const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(p * n)));
  return sorted[rank - 1];
}

std::string compact_tokens(std::int64_t n) {
  if (n >= 1000000) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 10000) return fmt::format("{:.0f}K", n / 1e3);
  return std::to_string(n);
}

double percent(std::int64_t part, std::int64_t whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

}  // namespace

std::vector<std::int64_t> ShardDocuments::lengths() const {
  std::vector<std::int64_t> out(ends.size());
  for (std::int64_t d = 0; d < count(); ++d) out[d] = length(d);
  return out;
}

ShardDocuments find_documents(const TokenShard& shard) {
  ShardDocuments docs;
  const std::int64_t n = shard.size();
  if (n == 0) return docs;
  docs.end_id = shard.at(n - 1);
  std::vector<std::int32_t> buffer(static_cast<std::size_t>(std::min(n, kScanChunk)));
  for (std::int64_t begin = 0; begin < n; begin += kScanChunk) {
    const std::int64_t count = std::min(kScanChunk, n - begin);
    shard.read(begin, count, buffer.data());
    for (std::int64_t i = 0; i < count; ++i)
      if (buffer[i] == docs.end_id) docs.ends.push_back(begin + i + 1);
  }
  const std::int64_t recorded = shard.info().num_documents;
  DARK_CHECK(docs.count() >= recorded, "token shard ", shard.path(), ": its header counts ", recorded,
             " documents, but its end-of-document token ", docs.end_id, " (its last token) occurs only ", docs.count(),
             " times: the documents do not all end with one end-of-document token; re-run prepare");
  docs.inner_ends = docs.count() - recorded;
  if (docs.inner_ends > 0)
    spdlog::warn("token shard {}: the end-of-document token {} occurs {} times inside its {} documents (special-token "
                 "text in the corpus, encoded as that id); windows stop there too, as at a document's end",
                 shard.path(), docs.end_id, docs.inner_ends, recorded);
  return docs;
}

LengthDistribution length_distribution(std::vector<std::int64_t> lengths) {
  LengthDistribution d;
  std::sort(lengths.begin(), lengths.end());
  d.documents = static_cast<std::int64_t>(lengths.size());
  for (const std::int64_t len : lengths) {
    d.tokens += len;
    for (std::size_t t = 0; t < d.kThresholds.size(); ++t)
      if (len >= d.kThresholds[t]) ++d.reaching[t], d.tokens_reaching[t] += len;
  }
  d.p50 = nearest_rank(lengths, 0.5);
  d.p90 = nearest_rank(lengths, 0.9);
  d.max = lengths.empty() ? 0 : lengths.back();
  return d;
}

std::string describe(const LengthDistribution& d) {
  if (d.documents == 0) return "no documents";
  std::string out = fmt::format("{} documents, {} tokens; tokens per document p50 {}, p90 {}, max {}", d.documents,
                                compact_tokens(d.tokens), d.p50, d.p90, d.max);
  for (std::size_t t = 0; t < d.kThresholds.size(); ++t)
    out += fmt::format("{} >= {}K: {}{} ({:.0f}%{})", t == 0 ? ";" : ",", d.kThresholds[t] / 1024, d.reaching[t],
                       t == 0 ? " documents" : "", percent(d.tokens_reaching[t], d.tokens),
                       t == 0 ? " of the tokens" : "");
  return out;
}

nlohmann::json to_json(const LengthDistribution& d) {
  nlohmann::json reaching = nlohmann::json::object();
  for (std::size_t t = 0; t < d.kThresholds.size(); ++t)
    reaching[std::to_string(d.kThresholds[t])] = {{"documents", d.reaching[t]}, {"tokens", d.tokens_reaching[t]}};
  return {{"documents", d.documents}, {"tokens", d.tokens}, {"p50", d.p50},
          {"p90", d.p90},             {"max", d.max},       {"reaching", reaching}};
}

}  // namespace dark::data
