// train::evaluate (train/evaluate.h): the mean loss and accuracy and their split by position
// bucket against a naive per-position computation (the full logits of forward(), a
// log-softmax per row in float64 on the host), at window lengths that end inside a bucket, on
// one, two and all five buckets; chunks of rows that do not divide the batch; today's path
// before it (full logits, cross_entropy, argmax) within float rounding; the bucket sums of
// train/metrics/by_position.h by hand; their JSON form, metrics.jsonl and TensorBoard tags.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attention/factory.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/file_io.h"
#include "data/loader.h"
#include "data/shard.h"
#include "nn/model.h"
#include "tests/test_util.h"
#include "tests/train_test_util.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/metrics/by_position.h"
#include "train/metrics/run_metrics.h"
#include "train/run_events.h"
#include "train/trainer.h"

namespace dark::evaluate_test {
namespace {

using testing::TempDir;

constexpr int kVocab = 37;

std::unique_ptr<nn::CausalLM> tiny_model(DType dtype) {
  nn::ModelConfig c;
  c.vocab_size = kVocab, c.d_model = 16, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.d_ff = 32;
  c.init_std = 0.3;  // confident enough that the top-1 is right now and then
  c.max_seq_len = 4200;
  c.dtype = dtype;
  return std::make_unique<nn::CausalLM>(c, attention::make_factory({}));
}

// `windows` windows of seq_len + 1 tokens (stride seq_len) of pseudo-random tokens with some
// structure (a token often repeats the one 3 back, so the model's guesses vary by position).
std::shared_ptr<const data::TokenShard> shard_of(const TempDir& tmp, std::int64_t seq_len, std::int64_t windows) {
  const std::int64_t n = windows * seq_len + 1;
  std::vector<std::int32_t> ids(n);
  std::uint64_t x = 12345 + static_cast<std::uint64_t>(seq_len);
  for (std::int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    ids[i] = i >= 3 && (x >> 60) < 6 ? ids[i - 3] : static_cast<std::int32_t>((x >> 33) % kVocab);
  }
  const std::string path = tmp / ("val" + std::to_string(seq_len) + ".bin");
  data::ShardWriter w(path, "test", kVocab);
  w.append_document(ids);
  w.finish();
  return data::TokenShard::open(path, "test");
}

// The naive reference: per bucket name (and "all"), summed losses, hits and tokens.
struct Sums {
  double loss = 0, hits = 0, tokens = 0;
};
std::map<std::string, Sums> naive(nn::CausalLM& model, const data::ValidationSet& val) {
  NoGradGuard no_grad;
  model.train(false);
  std::map<std::string, Sums> out;
  for (std::int64_t b = 0; b < val.num_batches(); ++b) {
    const Tensor tokens = val.batch(b);
    const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
    const std::vector<double> logits = testing::values(model.forward(core::slice(tokens, 1, 0, T).contiguous()));
    const std::vector<std::int32_t> ids = tokens.to_vector<std::int32_t>();
    for (std::int64_t r = 0; r < B; ++r)
      for (std::int64_t t = 0; t < T; ++t) {
        const double* row = &logits[(r * T + t) * kVocab];
        const std::int32_t target = ids[r * (T + 1) + t + 1];
        double top = row[0];
        int best = 0;
        for (int v = 1; v < kVocab; ++v)
          if (row[v] > top) top = row[v], best = v;
        double z = 0;
        for (int v = 0; v < kVocab; ++v) z += std::exp(row[v] - top);
        const double loss = top + std::log(z) - row[target];  // -log_softmax(row)[target]
        std::string bucket;
        for (const metrics::PositionBucket& pb : metrics::position_buckets())
          if (t + 1 >= pb.first && t + 1 <= pb.last) bucket = pb.name;
        for (const std::string& key : {bucket, std::string("all")}) {
          out[key].loss += loss;
          out[key].hits += best == target;
          out[key].tokens += 1;
        }
      }
  }
  return out;
}

void expect_matches(const train::EvalMetrics& m, const std::map<std::string, Sums>& want, double rtol,
                    const std::string& what) {
  const Sums& all = want.at("all");
  EXPECT_EQ(m.tokens, all.tokens) << what;
  EXPECT_NEAR(m.loss, all.loss / all.tokens, rtol * all.loss / all.tokens) << what;
  EXPECT_DOUBLE_EQ(m.accuracy, all.hits / all.tokens) << what;
  EXPECT_NEAR(m.perplexity, std::exp(all.loss / all.tokens), rtol * 10 * std::exp(all.loss / all.tokens)) << what;
  // Exactly the buckets some position reaches, nearest first.
  std::vector<std::string> names;
  for (const metrics::PositionBucket& pb : metrics::position_buckets())
    if (want.contains(pb.name)) names.push_back(pb.name);
  ASSERT_EQ(m.by_position.size(), names.size()) << what;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const metrics::BucketMetrics& got = m.by_position[i];
    const Sums& w = want.at(names[i]);
    EXPECT_EQ(got.bucket, names[i]) << what;
    EXPECT_EQ(got.tokens, w.tokens) << what << " " << names[i];
    EXPECT_NEAR(got.loss, w.loss / w.tokens, rtol * w.loss / w.tokens) << what << " " << names[i];
    EXPECT_DOUBLE_EQ(got.accuracy, w.hits / w.tokens) << what << " " << names[i];
  }
}

TEST(Evaluate, ByPositionMatchesANaivePerPositionComputation) {
  TempDir tmp;
  // Windows that end on a bucket's last position (64), inside one (70, 300, 1100) and in the
  // open one (4100: all five); 5 windows in batches of 2 (the last batch holds one).
  struct Case {
    std::int64_t seq_len, windows, batch;
    std::size_t buckets;
  };
  for (const Case c : {Case{1, 5, 2, 1}, Case{64, 5, 2, 1}, Case{70, 5, 2, 2}, Case{300, 5, 2, 3}, Case{1100, 3, 2, 4},
                       Case{4100, 2, 2, 5}}) {
    const data::ValidationSet val(shard_of(tmp, c.seq_len, c.windows), c.batch, c.seq_len);
    for (DType dtype : {DType::f64, DType::f32}) {
      auto model = tiny_model(dtype);
      const std::map<std::string, Sums> want = naive(*model, val);
      const std::string what = str("seq_len ", c.seq_len, " ", dtype_name(dtype));
      // f64: the same sums up to the order; f32: the logits' rounding (one GEMM of all rows
      // against a chunk's) and the f32 logsumexp.
      const double rtol = dtype == DType::f64 ? 1e-12 : 2e-6;
      const train::EvalMetrics m = train::evaluate(*model, val, 0);
      ASSERT_NO_FATAL_FAILURE(expect_matches(m, want, rtol, what));
      EXPECT_EQ(m.by_position.size(), c.buckets) << what;
      // Chunks of 7 rows: the row count is no multiple of 7 and chunks cross window ends.
      expect_matches(train::evaluate(*model, val, 0, 7 * kVocab), want, rtol, what + ", chunks of 7 rows");
    }
  }
}

TEST(Evaluate, EqualsTheFullLogitsCrossEntropyWithinFloatRounding) {
  // The path evaluate() took before the chunks: the (B T, V) logits, cross_entropy's mean
  // times B T per batch, argmax against the targets.
  TempDir tmp;
  const data::ValidationSet val(shard_of(tmp, 150, 7), 3, 150);
  auto model = tiny_model(DType::f32);
  NoGradGuard no_grad;
  model->train(false);
  double loss = 0, hits = 0, count = 0;
  for (std::int64_t b = 0; b < val.num_batches(); ++b) {
    const Tensor tokens = val.batch(b);
    const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
    const Tensor logits = reshape(model->forward(core::slice(tokens, 1, 0, T).contiguous()), {B * T, kVocab});
    const Tensor targets = core::reshape(core::slice(tokens, 1, 1, T + 1).contiguous(), {B * T});
    loss += cross_entropy(logits, targets).item() * static_cast<double>(B * T);
    hits += sum(eq(argmax(logits), targets.to(DType::i64)).to(DType::f64)).item();
    count += static_cast<double>(B * T);
  }
  const train::EvalMetrics m = train::evaluate(*model, val, 0, 5 * kVocab);
  EXPECT_NEAR(m.loss, loss / count, 1e-6 * loss / count);
  EXPECT_DOUBLE_EQ(m.accuracy, hits / count);
  EXPECT_EQ(m.tokens, static_cast<std::int64_t>(count));
  // A limit on the batches: the first two only (6 windows).
  EXPECT_EQ(train::evaluate(*model, val, 2).tokens, 6 * 150);
}

TEST(Evaluate, BucketSumsByHand) {
  // Positions 0..299 (context 1..300): loss t, a hit at every even t, 2 tokens each.
  std::vector<double> loss(300), hits(300), tokens(300, 2.0);
  for (int t = 0; t < 300; ++t) loss[t] = t, hits[t] = t % 2 == 0 ? 2.0 : 0.0;
  const metrics::ByPosition b = metrics::bucket_positions(loss, hits, tokens);
  ASSERT_EQ(b.size(), 3u);  // 1-64, 65-256, 257-1K (positions 256..299); 1K-4K and 4K+ absent
  EXPECT_EQ(b[0].bucket, "1-64");
  EXPECT_DOUBLE_EQ(b[0].loss, (63 * 64 / 2.0) / 128);  // sum of t over 0..63, 128 tokens
  EXPECT_DOUBLE_EQ(b[0].accuracy, 0.5);
  EXPECT_EQ(b[0].tokens, 128);
  EXPECT_EQ(b[1].bucket, "65-256");
  EXPECT_DOUBLE_EQ(b[1].loss, ((64 + 255) * 192 / 2.0) / 384);
  EXPECT_EQ(b[1].tokens, 384);
  EXPECT_EQ(b[2].bucket, "257-1K");
  EXPECT_DOUBLE_EQ(b[2].loss, ((256 + 299) * 44 / 2.0) / 88);
  EXPECT_EQ(b[2].tokens, 88);
  // Positions with no token (a bucket reached by no window) are absent, not zero.
  std::vector<double> none(100, 0.0);
  EXPECT_TRUE(metrics::bucket_positions(none, none, none).empty());
  testing::expect_error([] { metrics::bucket_positions({1.0}, {1.0}, {}); }, {"one of each per position"});

  // The JSON form reads back in bucket order, whatever the object's key order.
  const nlohmann::json j = metrics::by_position_json(b);
  EXPECT_EQ(j["65-256"]["tokens"], 384);
  const metrics::ByPosition back = metrics::by_position_from_json(j);
  ASSERT_EQ(back.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back[i].bucket, b[i].bucket);
    EXPECT_DOUBLE_EQ(back[i].loss, b[i].loss);
    EXPECT_DOUBLE_EQ(back[i].accuracy, b[i].accuracy);
    EXPECT_EQ(back[i].tokens, b[i].tokens);
  }
  testing::expect_error([] { metrics::by_position_from_json({{"1-128", {{"loss", 1.0}}}}); }, {"unknown bucket \"1-128\""});
  // The text table of eval: a line per bucket, with the change against a reference.
  const std::string table = metrics::by_position_table(b, "  ", {{"1-64", 30.0, 0.5, 128}});
  EXPECT_NE(table.find("1-64     |  15.7500"), std::string::npos) << table;
  EXPECT_NE(table.find("-14.2500"), std::string::npos) << table;
}

TEST(Evaluate, EvaluationLinesCarryTheBucketsIntoMetricsAndTensorBoard) {
  TempDir tmp;
  nlohmann::json config = train::quiet(train::tiny_config(tmp, "run", 10));
  config["data"]["seq_len"] = 80;  // two buckets: 1-64 and 65-256
  config["data"]["val_windows"] = 4;
  config["training"]["batch_size"] = 2;
  train::train(train::parse_config(config), {});
  const metrics::RunMetrics m = metrics::read_metrics(tmp.path() / "run/metrics.jsonl");
  ASSERT_EQ(m.evals.size(), 1u);  // the final one (step 10)
  const metrics::EvalRecord& e = m.evals[0];
  ASSERT_EQ(e.by_position.size(), 2u);
  EXPECT_EQ(e.by_position[0].bucket, "1-64");
  EXPECT_EQ(e.by_position[0].tokens, 4 * 64);  // eval_batches 2 x batch 2 = 4 windows
  EXPECT_EQ(e.by_position[1].bucket, "65-256");
  EXPECT_EQ(e.by_position[1].tokens, 4 * 16);
  // The mean of the buckets weighted by their tokens is the line's loss.
  EXPECT_NEAR((e.by_position[0].loss * 64 + e.by_position[1].loss * 16) / 80, e.loss, 1e-12 * e.loss);
  EXPECT_TRUE(e.ablations.empty());
  // TensorBoard: the line's scalars, tagged by bucket.
  std::istringstream lines(read_file(tmp.path() / "run/metrics.jsonl"));
  std::string last;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) last = line;
  std::map<std::string, double> tags;
  for (const auto& [tag, value] : train::line_scalars(nlohmann::json::parse(last))) tags[tag] = value;
  EXPECT_DOUBLE_EQ(tags.at("eval_by_position/1-64/loss"), e.by_position[0].loss);
  EXPECT_DOUBLE_EQ(tags.at("eval_by_position/65-256/accuracy"), e.by_position[1].accuracy);
  EXPECT_EQ(tags.at("eval_by_position/65-256/tokens"), 64);
}

}  // namespace
}  // namespace dark::evaluate_test
