// The documents of a token shard: where each one ends, and the distribution of their lengths
// in tokens (what `prepare-data` prints per split).
//
// Every document of a shard ends with the end-of-document token (shard.h), so the shard's last
// token is that token, and the documents are the spans up to and including each occurrence of
// it. They are found by a scan when a loader opens a shard, not read from a stored index:
// - existing prepared folders keep working unchanged (no new file, no format version, no
//   rebuild of shards that took minutes to tokenize);
// - the scan reads each token once, as opening a shard already does to verify its checksum
//   (TokenShard::open): 16 ms for the 10.7M tokens of the longdocs train split (61 ms with a
//   cold page cache; 2-6 ms for the quickstart's 3M) on 2 cores of an AMD EPYC, small beside
//   building the model, and it cannot disagree with the tokens it describes;
// - the result is checked against the header's document count: fewer end tokens than documents
//   means the shard does not end each document with one token (an error); more means some
//   document's text was encoded to the end-of-document id itself (a byte-level BPE tokenizer
//   encodes special-token text such as "<|im_end|>" as the special id, bpe_tokenizer.h), and
//   the documents are cut there too, with a warning: a window then stops at that token as at
//   a document's end, never crossing it.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"

namespace dark::data {

struct ShardDocuments {
  std::int32_t end_id = -1;         // the end-of-document token (the shard's last token); -1 when empty
  std::vector<std::int64_t> ends;   // one past each document's last token, ascending; back() == shard size
  std::int64_t inner_ends = 0;      // end tokens beyond the header's document count (see above)

  std::int64_t count() const { return static_cast<std::int64_t>(ends.size()); }
  std::int64_t start(std::int64_t d) const { return d == 0 ? 0 : ends[d - 1]; }
  std::int64_t length(std::int64_t d) const { return ends[d] - start(d); }
  std::vector<std::int64_t> lengths() const;
};

// Scans `shard` (see above). Throws naming the shard when it has fewer end-of-document tokens
// than its header counts documents; logs a warning when it has more.
ShardDocuments find_documents(const TokenShard& shard);

// The length distribution of a split's documents, in tokens (bos and the end-of-document
// token included: what the loaders cut windows from).
struct LengthDistribution {
  static constexpr std::array<std::int64_t, 3> kThresholds = {1024, 4096, 8192};
  std::int64_t documents = 0, tokens = 0;
  // Nearest-rank percentiles: the smallest length that at least p of the documents do not
  // exceed (sorted[ceil(p n) - 1]); 0 for no documents.
  std::int64_t p50 = 0, p90 = 0, max = 0;
  std::array<std::int64_t, 3> reaching{};         // documents with >= kThresholds[i] tokens
  std::array<std::int64_t, 3> tokens_reaching{};  // the tokens of those documents
};

LengthDistribution length_distribution(std::vector<std::int64_t> lengths);
// "3387 documents, 9.88M tokens; tokens per document p50 1277, p90 6891, max 92783; >= 1K:
// 1894 documents (93% of the tokens), >= 4K: 630 (66%), >= 8K: 263 (45%)"
std::string describe(const LengthDistribution& d);
nlohmann::json to_json(const LengthDistribution& d);

}  // namespace dark::data
