// Loaders: window layout, deterministic Philox order, no window twice within an epoch,
// resume-at-step equality, the fixed validation set, and the error
// for a corpus shorter than one window.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "test_util.h"

namespace dark::data {
namespace {

using dark::testing::TempDir;

// A shard whose token at position i is i, so a row's first token names its window.
std::shared_ptr<const TokenShard> counting_shard(const TempDir& tmp, std::int32_t n) {
  const std::string path = tmp / ("count" + std::to_string(n) + ".bin");
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) ids[i] = i;
  ShardWriter w(path, "count", std::max<std::int64_t>(n, 1));
  w.append_document(ids);
  w.finish();
  return TokenShard::open(path, "count");
}

TEST(DataLoader, BatchesAreWindowsOfSeqLenPlusOne) {
  TempDir tmp;
  const auto shard = counting_shard(tmp, 1001);
  LoaderOptions o;
  o.batch_size = 4;
  o.seq_len = 10;
  const TrainLoader loader(shard, o);
  EXPECT_EQ(loader.num_windows(), 100);  // (1001 - 1) / 10: the last window ends at token 1000
  EXPECT_EQ(loader.batches_per_epoch(), 25);
  const Tensor b = loader.batch(3);
  EXPECT_EQ(b.dtype(), DType::i32);
  EXPECT_EQ(b.shape(), (Shape{4, 11}));
  const auto v = b.to_vector<std::int32_t>();
  const auto windows = loader.window_indices(3);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 11; ++c) EXPECT_EQ(v[r * 11 + c], windows[r] * 10 + c);
}

TEST(DataLoader, EachEpochVisitsEveryWindowOnceInASeededOrder) {
  TempDir tmp;
  const auto shard = counting_shard(tmp, 5001);
  LoaderOptions o;
  o.batch_size = 7;
  o.seq_len = 16;
  o.seed = 42;
  const TrainLoader loader(shard, o);
  const std::int64_t W = loader.num_windows(), S = loader.batches_per_epoch();
  ASSERT_EQ(W, 312);
  ASSERT_EQ(S, 312 / 7);
  std::vector<std::vector<std::int64_t>> epochs(3);
  for (std::int64_t s = 0; s < 3 * S; ++s) {
    const auto w = loader.window_indices(s);
    epochs[s / S].insert(epochs[s / S].end(), w.begin(), w.end());
  }
  for (const auto& e : epochs) {
    EXPECT_EQ(std::set<std::int64_t>(e.begin(), e.end()).size(), e.size()) << "a window repeats within an epoch";
    EXPECT_EQ(static_cast<std::int64_t>(e.size()), S * 7);
    for (auto w : e) EXPECT_TRUE(w >= 0 && w < W);
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled each epoch
  std::vector<std::int64_t> sorted = epochs[0];
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, epochs[0]);     // not in shard order

  // Same seed: same batches from a second loader; another seed: another order.
  const TrainLoader again(shard, o);
  for (std::int64_t s : {0, 5, 44, 100}) EXPECT_EQ(again.window_indices(s), loader.window_indices(s));
  o.seed = 43;
  const TrainLoader other(shard, o);
  EXPECT_NE(other.window_indices(0), loader.window_indices(0));
}

TEST(DataLoader, ResumingAtAStepReproducesTheUninterruptedRun) {
  TempDir tmp;
  const auto shard = counting_shard(tmp, 3001);
  LoaderOptions o;
  o.batch_size = 5;
  o.seq_len = 12;
  o.seed = 9;
  const TrainLoader run(shard, o);
  std::vector<std::vector<std::int32_t>> straight;
  for (std::int64_t s = 0; s < 120; ++s) straight.push_back(run.batch(s).to_vector<std::int32_t>());
  const TrainLoader resumed(shard, o);  // fresh process, starts at step 77 (crosses epoch boundaries)
  for (std::int64_t s = 77; s < 120; ++s) EXPECT_EQ(resumed.batch(s).to_vector<std::int32_t>(), straight[s]) << s;
  // Going back to an earlier epoch after a later one gives the same batch again.
  EXPECT_EQ(resumed.batch(3).to_vector<std::int32_t>(), straight[3]);
}

TEST(DataLoader, ValidationSetIsFixedAndEvenlySpaced) {
  TempDir tmp;
  const auto shard = counting_shard(tmp, 1001);
  const ValidationSet all(shard, 8, 10);
  EXPECT_EQ(all.num_windows(), 100);
  EXPECT_EQ(all.num_batches(), 13);
  EXPECT_EQ(all.batch(12).shape(), (Shape{4, 11}));  // the last batch holds the remaining 4 windows
  for (std::int64_t k = 0; k < 100; ++k) EXPECT_EQ(all.window_indices()[k], k);
  const ValidationSet some(shard, 4, 10, 10);
  EXPECT_EQ(some.window_indices(), (std::vector<std::int64_t>{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}));
  const auto first = some.batch(1).to_vector<std::int32_t>();
  EXPECT_EQ(first[0], 400);  // window 40 starts at token 400
  EXPECT_EQ(some.batch(1).to_vector<std::int32_t>(), first);
  EXPECT_EQ(ValidationSet(shard, 4, 10, 10).batch(1).to_vector<std::int32_t>(), first);
  EXPECT_THROW(some.batch(3), Error);
}

TEST(DataLoader, CorpusShorterThanOneWindowIsAClearError) {
  TempDir tmp;
  const auto shard = counting_shard(tmp, 64);
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 64;
  try {
    TrainLoader loader(shard, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("shorter than seq_len + 1"), std::string::npos) << m;
    EXPECT_NE(m.find("64 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("= 65"), std::string::npos) << m;
  }
  EXPECT_THROW(ValidationSet(shard, 1, 64), Error);
  o.seq_len = 63;
  EXPECT_EQ(TrainLoader(shard, o).num_windows(), 1);
  // Enough tokens for a window but not for one batch.
  o.batch_size = 2;
  try {
    TrainLoader loader(shard, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than one batch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dark::data
