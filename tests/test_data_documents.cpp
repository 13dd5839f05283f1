// A shard's documents (data/documents.h): the scan for end-of-document tokens against the
// documents as written; the length distribution against a brute-force computation here and a
// hand-worked case; prepare() recording it in meta.json and printing it per split, and still
// reusing a folder whose meta.json predates the record (no rebuild).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/file_io.h"
#include "data/documents.h"
#include "data/prepare.h"
#include "test_util.h"

namespace dark::data::documents_test {
namespace {

using dark::testing::TempDir;
using dark::testing::write_text;
namespace fs = std::filesystem;
using Ids = std::vector<std::int32_t>;

TEST(DataDocuments, TheScanFindsEveryDocumentAsWritten) {
  TempDir tmp;
  const std::string path = tmp / "docs.bin";
  const std::vector<std::int64_t> lengths = {1, 4, 70000, 2, 3};  // one spans the scan's 65536-token chunks
  {
    ShardWriter w(path, "docs", 100);
    for (std::size_t d = 0; d < lengths.size(); ++d) {
      Ids doc(static_cast<std::size_t>(lengths[d]), static_cast<std::int32_t>(10 + d));
      doc.back() = 3;
      w.append_document(doc);
    }
    w.finish();
  }
  const ShardDocuments docs = find_documents(*TokenShard::open(path, "docs"));
  EXPECT_EQ(docs.end_id, 3);
  EXPECT_EQ(docs.lengths(), lengths);
  EXPECT_EQ(docs.ends, (std::vector<std::int64_t>{1, 5, 70005, 70007, 70010}));
  EXPECT_EQ(docs.inner_ends, 0);
  EXPECT_EQ(docs.start(2), 5);

  const std::string empty = tmp / "empty.bin";
  ShardWriter(empty, "docs", 100).finish();
  const ShardDocuments none = find_documents(*TokenShard::open(empty, "docs"));
  EXPECT_EQ(none.count(), 0);
  EXPECT_EQ(none.end_id, -1);
}

// Brute force: the smallest document length L such that at least p of the documents have a
// length <= L, over every candidate L.
std::int64_t brute_percentile(const std::vector<std::int64_t>& lengths, double p) {
  std::int64_t best = -1;
  for (const std::int64_t candidate : lengths) {
    const auto at_most = std::count_if(lengths.begin(), lengths.end(), [&](std::int64_t l) { return l <= candidate; });
    if (static_cast<double>(at_most) >= p * static_cast<double>(lengths.size()) && (best < 0 || candidate < best))
      best = candidate;
  }
  return best;
}

TEST(DataDocuments, LengthDistributionMatchesABruteForceCount) {
  std::uint64_t state = 7;
  for (const int n : {1, 2, 3, 9, 10, 11, 100, 1001}) {
    std::vector<std::int64_t> lengths;
    for (int i = 0; i < n; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      lengths.push_back(1 + static_cast<std::int64_t>((state >> 33) % 12000));
    }
    const LengthDistribution d = length_distribution(lengths);
    EXPECT_EQ(d.documents, n);
    std::int64_t tokens = 0;
    for (const auto l : lengths) tokens += l;
    EXPECT_EQ(d.tokens, tokens);
    EXPECT_EQ(d.p50, brute_percentile(lengths, 0.5)) << n;
    EXPECT_EQ(d.p90, brute_percentile(lengths, 0.9)) << n;
    EXPECT_EQ(d.max, *std::max_element(lengths.begin(), lengths.end()));
    for (std::size_t t = 0; t < 3; ++t) {
      std::int64_t count = 0, in_them = 0;
      for (const auto l : lengths)
        if (l >= LengthDistribution::kThresholds[t]) ++count, in_them += l;
      EXPECT_EQ(d.reaching[t], count) << n << " " << t;
      EXPECT_EQ(d.tokens_reaching[t], in_them) << n << " " << t;
    }
  }
}

TEST(DataDocuments, LengthDistributionOfAHandWorkedSplit) {
  // Sorted: 10 1023 1024 4095 4096 8191 8192 9000 20000 30000. p50: rank ceil(5) = 5th, 4096;
  // p90: rank 9, 20000. >= 1024: 8 documents, 84598 of 85631 tokens (99%); >= 4096: 6, 79479
  // (93%); >= 8192: 4, 67192 (78%).
  const LengthDistribution d = length_distribution({9000, 10, 4096, 30000, 1023, 8192, 1024, 20000, 4095, 8191});
  EXPECT_EQ(d.tokens, 85631);
  EXPECT_EQ(d.p50, 4096);
  EXPECT_EQ(d.p90, 20000);
  EXPECT_EQ(d.max, 30000);
  EXPECT_EQ(d.reaching, (std::array<std::int64_t, 3>{8, 6, 4}));
  EXPECT_EQ(d.tokens_reaching, (std::array<std::int64_t, 3>{84598, 79479, 67192}));
  EXPECT_EQ(describe(d), "10 documents, 86K tokens; tokens per document p50 4096, p90 20000, max 30000; >= 1K: 8 "
                         "documents (99% of the tokens), >= 4K: 6 (93%), >= 8K: 4 (78%)");
  EXPECT_EQ(describe(length_distribution({})), "no documents");
  const nlohmann::json j = to_json(d);
  EXPECT_EQ(j["p90"], 20000);
  EXPECT_EQ(j["reaching"]["4096"]["documents"], 6);
  EXPECT_EQ(j["reaching"]["8192"]["tokens"], 67192);
}

// Runs prepare() with the log captured.
std::string prepare_logged(const DataConfig& cfg, PreparedData* out = nullptr) {
  std::ostringstream captured;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)));
  try {
    PreparedData data = prepare(cfg);
    if (out) *out = std::move(data);
  } catch (...) {
    spdlog::set_default_logger(previous);
    throw;
  }
  spdlog::set_default_logger(previous);
  return captured.str();
}

TEST(DataDocuments, PrepareRecordsAndPrintsEachSplitsDistributionAndReusesOlderFolders) {
  TempDir tmp;
  // Byte tokenizer: a document is its bytes plus the end-of-document token.
  std::vector<std::int64_t> train_lengths, val_lengths;
  for (int i = 0; i < 12; ++i) write_text(tmp / ("src/doc" + std::to_string(i) + ".txt"), std::string(100 + 700 * i, 'a'));
  DataConfig cfg;
  cfg.sources = {tmp / "src"};
  cfg.dir = tmp / "data";
  cfg.tokenizer = TokenizerKind::byte;
  cfg.val_fraction = 0.2;
  const Corpus corpus = Corpus::resolve("", cfg.sources, cfg.val_fraction);
  for (const auto& f : corpus.files())
    (f.split == Split::train ? train_lengths : val_lengths).push_back(static_cast<std::int64_t>(f.bytes) + 1);
  ASSERT_FALSE(val_lengths.empty());

  PreparedData data;
  const std::string built = prepare_logged(cfg, &data);
  EXPECT_FALSE(data.reused);
  const auto& shards = data.meta.at("shards");
  EXPECT_EQ(shards.at("train").at("document_lengths"), to_json(length_distribution(train_lengths)));
  EXPECT_EQ(shards.at("val").at("document_lengths"), to_json(length_distribution(val_lengths)));
  const std::string train_line = "data: train split: " + describe(length_distribution(train_lengths));
  const std::string val_line = "data: val split: " + describe(length_distribution(val_lengths));
  EXPECT_NE(built.find(train_line), std::string::npos) << built;
  EXPECT_NE(built.find(val_line), std::string::npos) << built;

  // A folder prepared before the distribution was recorded: reused as it is, and printed.
  nlohmann::json meta = nlohmann::json::parse(read_file(tmp / "data/meta.json"));
  meta["shards"]["train"].erase("document_lengths");
  meta["shards"]["val"].erase("document_lengths");
  write_file_atomic(tmp / "data/meta.json", meta.dump(2));
  const std::string reused = prepare_logged(cfg, &data);
  EXPECT_TRUE(data.reused) << reused;
  EXPECT_FALSE(data.meta["shards"]["train"].contains("document_lengths"));
  EXPECT_NE(reused.find(train_line), std::string::npos) << reused;
  EXPECT_NE(reused.find(val_line), std::string::npos) << reused;
}

}  // namespace
}  // namespace dark::data::documents_test
