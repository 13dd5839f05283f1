// Document windows (data.windows "document", data/windows.h): on small synthetic shards, every
// window of the validation set and the train loader against a naive enumeration written here
// from the documents' lengths (with and without bos, several seq_len, documents exactly one
// window long, one token short of it, shorter, and tails shorter than a window); no row holds
// an end-of-document token before its last slot; the train order is a permutation per epoch,
// seeded and resumable; the clear errors; the config key; a run's start-up log of its windows;
// a checkpoint saved before the key existed resumes on packed windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/file_io.h"
#include "data/loader.h"
#include "test_util.h"
#include "train/config.h"
#include "train/formats/checkpoint.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace dark::data::windows_test {
namespace {

using dark::testing::expect_error;
using dark::testing::TempDir;
using Ids = std::vector<std::int32_t>;

constexpr std::int32_t kBos = 1, kEos = 2, kFirstContent = 10;

// A shard of documents of the given lengths (tokens, bos and eos included). A content token
// names its shard position (kFirstContent + position), so a row shows where it was read.
struct SyntheticShard {
  std::shared_ptr<const TokenShard> shard;
  Ids stream;                              // every token, as written
  std::vector<std::int64_t> starts, lengths;  // per document
};

SyntheticShard synthetic_shard(const TempDir& tmp, const std::vector<std::int64_t>& lengths, bool bos,
                               const std::string& name = "docs") {
  SyntheticShard s;
  std::int64_t total = 0;
  for (const auto len : lengths) total += len;
  const std::string path = tmp / (name + ".bin");
  ShardWriter w(path, "synthetic", kFirstContent + total);
  for (const auto len : lengths) {
    const std::int64_t start = static_cast<std::int64_t>(s.stream.size());
    Ids doc;
    for (std::int64_t i = 0; i < len; ++i) {
      const bool first = i == 0, last = i == len - 1;
      doc.push_back(last ? kEos : first && bos ? kBos : static_cast<std::int32_t>(kFirstContent + start + i));
    }
    s.starts.push_back(start);
    s.lengths.push_back(len);
    s.stream.insert(s.stream.end(), doc.begin(), doc.end());
    w.append_document(doc);
  }
  w.finish();
  s.shard = TokenShard::open(path, "synthetic");
  return s;
}

// The naive enumeration: per document in order, a window at every start + k * seq_len whose
// seq_len + 1 tokens end inside the document.
std::vector<std::int64_t> naive_window_starts(const SyntheticShard& s, std::int64_t seq_len) {
  std::vector<std::int64_t> out;
  for (std::size_t d = 0; d < s.starts.size(); ++d)
    for (std::int64_t k = 0; (k + 1) * seq_len + 1 <= s.lengths[d]; ++k) out.push_back(s.starts[d] + k * seq_len);
  return out;
}

// The row a window starting at `start` must give: its tokens as they lie, or with bos on and a
// start that is not bos, bos and then the first seq_len of them.
Ids expected_row(const SyntheticShard& s, std::int64_t start, std::int64_t seq_len, std::int32_t bos_id) {
  const auto first = s.stream.begin() + start;
  if (bos_id < 0 || s.stream[start] == bos_id) return Ids(first, first + seq_len + 1);
  Ids row = {bos_id};
  row.insert(row.end(), first, first + seq_len);
  return row;
}

Ids row_of(const Tensor& batch, std::int64_t r) {
  const std::int64_t cols = batch.shape()[1];
  const std::int32_t* p = batch.data<std::int32_t>() + r * cols;
  return Ids(p, p + cols);
}

// A document boundary inside a row shows as an end-of-document token before its last slot.
void expect_no_crossing(const Ids& row, const std::string& where) {
  for (std::size_t c = 0; c + 1 < row.size(); ++c) ASSERT_NE(row[c], kEos) << where << ": crosses a document end at " << c;
}

// Lengths that hit the edge cases at every seq_len below: 1-token documents, documents one
// token short of a window, exactly one window, one window plus a tail, several windows.
const std::vector<std::int64_t> kLengths = {17, 1, 5, 9, 8, 2, 33, 4, 16, 3, 40, 6, 25};

TEST(DataWindows, ValidationSetHasExactlyTheNaiveDocumentWindows) {
  for (const bool bos : {false, true}) {
    TempDir tmp;
    const SyntheticShard s = synthetic_shard(tmp, kLengths, bos);
    const std::int32_t bos_id = bos ? kBos : -1;
    for (const std::int64_t seq_len : {1, 2, 3, 4, 7, 8, 16, 32}) {
      const std::string where = "bos " + std::to_string(bos) + " seq_len " + std::to_string(seq_len);
      const std::vector<std::int64_t> naive = naive_window_starts(s, seq_len);
      ASSERT_FALSE(naive.empty()) << where;
      const ValidationSet val(s.shard, 5, seq_len, 0, Device::cpu(), bos_id, WindowMode::document);
      ASSERT_EQ(val.num_windows(), static_cast<std::int64_t>(naive.size())) << where;
      ASSERT_EQ(val.layout().size(), val.num_windows()) << where;
      std::int64_t covered = 0;
      for (std::size_t d = 0; d < s.lengths.size(); ++d) {
        const std::int64_t n = s.lengths[d] > seq_len ? (s.lengths[d] - 1) / seq_len : 0;
        covered += n > 0 ? n * seq_len + 1 : 0;
      }
      EXPECT_EQ(val.layout().covered_tokens(), covered) << where;
      EXPECT_EQ(val.layout().documents(), static_cast<std::int64_t>(kLengths.size())) << where;
      std::int64_t w = 0;
      for (std::int64_t b = 0; b < val.num_batches(); ++b) {
        const Tensor batch = val.batch(b);
        for (std::int64_t r = 0; r < batch.shape()[0]; ++r, ++w) {
          EXPECT_EQ(val.window_indices()[w], w);
          EXPECT_EQ(val.layout().start(w), naive[w]) << where << " window " << w;
          const Ids row = row_of(batch, r);
          EXPECT_EQ(row, expected_row(s, naive[w], seq_len, bos_id)) << where << " window " << w;
          expect_no_crossing(row, where);
          if (bos) EXPECT_EQ(row[0], kBos) << where;
        }
      }
      EXPECT_EQ(w, static_cast<std::int64_t>(naive.size()));
    }
  }
}

TEST(DataWindows, ValidationSubsetIsEvenlySpacedOverTheDocumentWindows) {
  TempDir tmp;
  const SyntheticShard s = synthetic_shard(tmp, kLengths, true);
  // Windows per document at seq_len 3, (length - 1) / 3 for lengths above 3, by hand:
  // 5 + 0 + 1 + 2 + 2 + 0 + 10 + 1 + 5 + 0 + 13 + 1 + 8.
  const std::vector<std::int64_t> naive = naive_window_starts(s, 3);
  ASSERT_EQ(naive.size(), 48u);
  const ValidationSet val(s.shard, 4, 3, 10, Device::cpu(), kBos, WindowMode::document);
  ASSERT_EQ(val.num_windows(), 10);
  for (std::int64_t k = 0; k < 10; ++k) {
    EXPECT_EQ(val.window_indices()[k], k * 48 / 10);
    EXPECT_EQ(row_of(val.batch(k / 4), k % 4), expected_row(s, naive[k * 48 / 10], 3, kBos)) << k;
  }
}

TEST(DataWindows, TrainLoaderReadsTheNaiveDocumentWindowsOncePerEpoch) {
  for (const bool bos : {false, true}) {
    TempDir tmp;
    const SyntheticShard s = synthetic_shard(tmp, kLengths, bos);
    for (const std::int64_t seq_len : {1, 3, 4, 8, 16}) {
      const std::string where = "bos " + std::to_string(bos) + " seq_len " + std::to_string(seq_len);
      const std::vector<std::int64_t> naive = naive_window_starts(s, seq_len);
      LoaderOptions o;
      o.batch_size = 2;
      o.seq_len = seq_len;
      o.seed = 5;
      o.bos_id = bos ? kBos : -1;
      o.windows = WindowMode::document;
      const TrainLoader loader(s.shard, o);
      ASSERT_EQ(loader.num_windows(), static_cast<std::int64_t>(naive.size())) << where;
      const std::int64_t S = loader.batches_per_epoch();
      ASSERT_EQ(S, loader.num_windows() / 2) << where;
      for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
        std::set<std::int64_t> seen;
        for (std::int64_t i = epoch * S; i < (epoch + 1) * S; ++i) {
          const auto windows = loader.window_indices(i);
          const Tensor batch = loader.batch(i);
          ASSERT_EQ(batch.shape(), (Shape{2, seq_len + 1}));
          for (std::int64_t r = 0; r < 2; ++r) {
            const std::int64_t win = windows[r];
            ASSERT_TRUE(win >= 0 && win < loader.num_windows()) << where;
            EXPECT_TRUE(seen.insert(win).second) << where << ": window " << win << " twice in epoch " << epoch;
            const Ids row = row_of(batch, r);
            EXPECT_EQ(row, expected_row(s, naive[win], seq_len, o.bos_id)) << where << " window " << win;
            expect_no_crossing(row, where);
          }
        }
        EXPECT_EQ(static_cast<std::int64_t>(seen.size()), 2 * S) << where;
      }
    }
  }
}

TEST(DataWindows, TrainOrderIsSeededAndResumesInDocumentMode) {
  TempDir tmp;
  std::vector<std::int64_t> lengths;
  for (int d = 0; d < 60; ++d) lengths.push_back(3 + (d * 37) % 90);
  const SyntheticShard s = synthetic_shard(tmp, lengths, true);
  LoaderOptions o;
  o.batch_size = 3;
  o.seq_len = 8;
  o.seed = 11;
  o.bos_id = kBos;
  o.windows = WindowMode::document;
  const TrainLoader run(s.shard, o);
  const std::int64_t S = run.batches_per_epoch();
  ASSERT_GT(S, 20);
  std::vector<Ids> straight;
  for (std::int64_t i = 0; i < 3 * S; ++i) straight.push_back(row_of(run.batch(i), 0));
  // A fresh loader (a resumed process) starting mid-epoch gives the same batches.
  const TrainLoader resumed(s.shard, o);
  for (std::int64_t i = S + 7; i < 3 * S; ++i) EXPECT_EQ(row_of(resumed.batch(i), 0), straight[i]) << i;
  EXPECT_EQ(row_of(resumed.batch(2), 0), straight[2]);  // back to an earlier epoch
  // Epochs are shuffled anew, not in shard order, and another seed gives another order.
  std::vector<std::int64_t> e0, e1;
  for (std::int64_t i = 0; i < S; ++i) {
    const auto a = run.window_indices(i), b = run.window_indices(S + i);
    e0.insert(e0.end(), a.begin(), a.end());
    e1.insert(e1.end(), b.begin(), b.end());
  }
  EXPECT_NE(e0, e1);
  EXPECT_FALSE(std::is_sorted(e0.begin(), e0.end()));
  o.seed = 12;
  EXPECT_NE(TrainLoader(s.shard, o).window_indices(0), run.window_indices(0));
  // The same permutation of window numbers as packed mode would draw for as many windows: the
  // order depends on (seed, epoch, number of windows) only.
  const SyntheticShard one = synthetic_shard(tmp, {static_cast<std::int64_t>(run.num_windows()) * 8 + 1}, true, "one");
  o.seed = 11;
  o.windows = WindowMode::packed;
  const TrainLoader packed(one.shard, o);
  ASSERT_EQ(packed.num_windows(), run.num_windows());
  for (std::int64_t i : {std::int64_t{0}, S - 1, S, 2 * S + 3}) EXPECT_EQ(packed.window_indices(i), run.window_indices(i));
}

TEST(DataWindows, PackedModeStillCrossesDocuments) {
  TempDir tmp;
  const SyntheticShard s = synthetic_shard(tmp, kLengths, false);
  const ValidationSet packed(s.shard, 4, 4, 0, Device::cpu(), -1, WindowMode::packed), plain(s.shard, 4, 4);
  EXPECT_EQ(packed.num_windows(), (static_cast<std::int64_t>(s.stream.size()) - 1) / 4);
  EXPECT_EQ(packed.window_indices(), plain.window_indices());
  for (std::int64_t b = 0; b < packed.num_batches(); ++b)
    EXPECT_EQ(packed.batch(b).to_vector<std::int32_t>(), plain.batch(b).to_vector<std::int32_t>());
  for (std::int64_t w = 0; w < packed.num_windows(); ++w) EXPECT_EQ(packed.layout().start(w), 4 * w);
  EXPECT_EQ(packed.layout().covered_tokens(), packed.num_windows() * 4 + 1);
}

TEST(DataWindows, NoDocumentLongEnoughNamesTheLongestAndSeqLen) {
  TempDir tmp;
  const SyntheticShard s = synthetic_shard(tmp, {5, 9, 3, 7}, false);  // 24 tokens
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 9;  // a window needs 10 tokens; the longest document has 9
  o.windows = WindowMode::document;
  const std::vector<std::string> parts = {"no document of", "its longest of 4 documents has 9 tokens",
                                          "seq_len + 1 = 10", "data.windows \"packed\""};
  expect_error([&] { TrainLoader loader(s.shard, o); }, parts);
  expect_error([&] { ValidationSet val(s.shard, 1, 9, 0, Device::cpu(), -1, WindowMode::document); }, parts);
  // Packed windows of the same shard exist.
  o.windows = WindowMode::packed;
  EXPECT_EQ(TrainLoader(s.shard, o).num_windows(), 2);
  // One document window, but a batch of two: the batch error, naming the mode.
  o.windows = WindowMode::document;
  o.seq_len = 8;
  o.batch_size = 2;
  expect_error([&] { TrainLoader loader(s.shard, o); }, {"1 document windows", "fewer than one batch"});
}

TEST(DataWindows, EndTokensInsideADocumentCutItAndDifferingEndsAreAnError) {
  TempDir tmp;
  // Two documents the header counts, the first holding an end token inside: three spans.
  const std::string path = tmp / "inner.bin";
  {
    ShardWriter w(path, "inner", 64);
    w.append_document(Ids{20, 21, 22, kEos, 23, 24, 25, 26, kEos});
    w.append_document(Ids{30, 31, 32, 33, 34, kEos});
    w.finish();
  }
  const auto shard = TokenShard::open(path, "inner");
  const ValidationSet val(shard, 8, 3, 0, Device::cpu(), -1, WindowMode::document);
  // Spans of 4, 5 and 6 tokens: one window each at seq_len 3.
  ASSERT_EQ(val.num_windows(), 3);
  EXPECT_EQ(row_of(val.batch(0), 0), (Ids{20, 21, 22, kEos}));
  EXPECT_EQ(row_of(val.batch(0), 1), (Ids{23, 24, 25, 26}));
  EXPECT_EQ(row_of(val.batch(0), 2), (Ids{30, 31, 32, 33}));
  EXPECT_EQ(val.layout().documents(), 3);

  // Documents ending with different tokens: fewer end tokens than documents.
  const std::string mixed = tmp / "mixed.bin";
  {
    ShardWriter w(mixed, "mixed", 64);
    w.append_document(Ids{20, 21, 22, 23, 7});
    w.append_document(Ids{30, 31, 32, 33, kEos});
    w.finish();
  }
  expect_error([&] { ValidationSet v(TokenShard::open(mixed, "mixed"), 1, 2, 0, Device::cpu(), -1, WindowMode::document); },
               {"header counts 2 documents", "occurs only 1 times", "re-run prepare"});
}

TEST(DataWindows, ConfigKeyDefaultsToDocumentAndRejectsOtherValues) {
  EXPECT_EQ(train::parse_config(nlohmann::json::object()).data.windows, WindowMode::document);
  EXPECT_EQ(train::parse_config(nlohmann::json{{"data", {{"windows", "packed"}}}}).data.windows, WindowMode::packed);
  expect_error([] { train::parse_config(nlohmann::json{{"data", {{"windows", "documents"}}}}); },
               {"data.windows", "document", "packed"});
  // A checkpoint's saved config from before the key: packed; one that names it: as named.
  const nlohmann::json old_run = {{"data", {{"seq_len", 64}}}};
  EXPECT_EQ(train::parse_saved_config(old_run).data.windows, WindowMode::packed);
  EXPECT_EQ(train::parse_saved_config(nlohmann::json{{"data", {{"windows", "document"}}}}).data.windows,
            WindowMode::document);
}

TEST(DataWindows, ARunLogsItsWindowsAndWarnsWhenValidationHasFewerThanAsked) {
  TempDir tmp;
  nlohmann::json config = train::quiet(train::tiny_config(tmp, "run", 1));
  config["data"]["val_windows"] = 100000;
  config["schedule"]["warmup_steps"] = 1;
  std::ostringstream captured;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)));
  try {
    train::train(train::parse_config(config), {});
  } catch (...) {
    spdlog::set_default_logger(previous);
    throw;
  }
  spdlog::set_default_logger(previous);
  // The expected counts, from the shards by a plain loop: byte documents end with eos (257).
  std::int64_t windows[2] = {0, 0}, tokens[2] = {0, 0};
  for (int split = 0; split < 2; ++split) {
    const auto shard = TokenShard::open(tmp / (split == 0 ? "data/train.bin" : "data/val.bin"));
    Ids all(static_cast<std::size_t>(shard->size()));
    shard->read(0, shard->size(), all.data());
    std::int64_t start = 0;
    for (std::int64_t i = 0; i < shard->size(); ++i)
      if (all[i] == all.back()) windows[split] += (i + 1 - start - 1) / 32, start = i + 1;
    tokens[split] = shard->size();
  }
  const std::string log = captured.str();
  EXPECT_NE(log.find("data: document windows of seq_len + 1 = 33 tokens: train " + std::to_string(windows[0]) +
                     " covering "),
            std::string::npos) << log;
  EXPECT_NE(log.find("; val " + std::to_string(windows[1]) + " of " + std::to_string(windows[1]) + " covering "),
            std::string::npos) << log;
  EXPECT_NE(log.find("of its " + std::to_string(tokens[1]) + " tokens"), std::string::npos) << log;
  EXPECT_NE(log.find("the validation split has " + std::to_string(windows[1]) +
                     " document windows of 33 tokens, fewer than data.val_windows 100000"),
            std::string::npos) << log;
}

TEST(DataWindows, ACheckpointFromBeforeTheKeyResumesOnPackedWindows) {
  namespace fs = std::filesystem;
  TempDir tmp;
  auto config = [&](const std::string& run, const char* windows) {
    nlohmann::json c = train::quiet(train::tiny_config(tmp, run, 30));
    if (windows) c["data"]["windows"] = windows;
    return c;
  };
  train::train(train::parse_config(config("packed", "packed")), {});
  train::train(train::parse_config(config("document", nullptr)), {});
  const auto packed = train::losses(tmp.path() / "packed"), document = train::losses(tmp.path() / "document");
  ASSERT_EQ(packed.size(), 30u);
  EXPECT_NE(packed.at(25), document.at(25));  // the two layouts train differently here

  // The packed run as a run from before data.windows: its checkpoints' configs lack the key.
  fs::copy(tmp.path() / "packed", tmp.path() / "old", fs::copy_options::recursive);
  fs::remove_all(tmp.path() / "old/checkpoints" / formats::checkpoint_name(30));
  {  // and the metrics of the steps after its last checkpoint, so that only the resume writes them
    std::istringstream lines(read_file((tmp.path() / "old/metrics.jsonl").string()));
    std::string kept;
    for (std::string line; std::getline(lines, line);)
      if (nlohmann::json::parse(line).value("step", std::int64_t{0}) <= 20) kept += line + "\n";
    write_file_atomic((tmp.path() / "old/metrics.jsonl").string(), kept);
  }
  for (const std::int64_t step : {10, 20}) {
    const fs::path state = tmp.path() / "old/checkpoints" / formats::checkpoint_name(step) / "state.json";
    nlohmann::json j = nlohmann::json::parse(read_file(state.string()));
    ASSERT_EQ(j["config"]["data"]["windows"], "packed");
    j["config"]["data"].erase("windows");
    write_file_atomic(state.string(), j.dump(1));
  }
  // Naming document windows contradicts the checkpoint; leaving the key out continues packed,
  // bit for bit.
  train::TrainOptions resume;
  resume.resume = true;
  expect_error([&] { train::train(train::parse_config(config("old", "document")), resume); }, {"config differs"});
  train::train(train::parse_config(config("old", nullptr)), resume);
  const auto resumed = train::losses(tmp.path() / "old");
  ASSERT_EQ(resumed.size(), 30u);
  for (std::int64_t step = 21; step <= 30; ++step) EXPECT_EQ(resumed.at(step), packed.at(step)) << "step " << step;
}

}  // namespace
}  // namespace dark::data::windows_test
