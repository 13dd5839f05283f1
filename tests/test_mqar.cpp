// MQAR (data/mqar.h) and the in-band scored targets (nn/model.h): sequences checked against
// the task's definition (keys distinct and keys, values and filler in their own id ranges,
// every query followed by its pair's value, distances as reported, scored entries exactly the
// query values, determinism by (seed, stream, index), the power law's pull); the loss against
// a naive cross-entropy over the scored targets alone; evaluate() and evaluate_mqar() against
// naive counts; the config's errors and auto values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "attention/factory.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "data/mqar.h"
#include "nn/model.h"
#include "tests/test_util.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/experiments/report.h"
#include "train/experiments/sweep.h"
#include "train/formats/checkpoint.h"
#include "train/mqar_eval.h"
#include "train/portable_checkpoint.h"
#include "train/trainer.h"

namespace dark::mqar_test {
namespace {

using nlohmann::json;

std::int32_t id_of(std::int32_t x) { return x < 0 ? -1 - x : x; }

data::MqarConfig config_of(std::vector<std::int64_t> pairs, int vocab, double power) {
  data::MqarConfig c;
  c.pairs = std::move(pairs);
  c.vocab = vocab;
  c.power = power;
  return c;
}

// Every property of the definition in data/mqar.h, from the tokens alone (the targets are
// checked against what the tokens say, not the other way round).
void expect_valid(const data::MqarSequence& s, const data::MqarConfig& c, std::int64_t seq_len, std::int64_t pairs,
                  const std::string& what) {
  const std::int64_t n = seq_len + 1, m = pairs;
  const std::int32_t keys = (c.vocab - 1) / 2;
  ASSERT_EQ(static_cast<std::int64_t>(s.tokens.size()), n) << what;
  ASSERT_EQ(s.pairs, m) << what;
  ASSERT_EQ(static_cast<std::int64_t>(s.targets.size()), m) << what;
  std::map<std::int32_t, std::int32_t> value_of;   // key -> value, from the pair section
  std::map<std::int32_t, std::int64_t> where_key;  // key -> its position
  for (std::int64_t i = 0; i < m; ++i) {
    EXPECT_LT(s.tokens[2 * i], 0) << what << ": pair tokens are not scored";
    EXPECT_LT(s.tokens[2 * i + 1], 0) << what;
    const std::int32_t k = id_of(s.tokens[2 * i]), v = id_of(s.tokens[2 * i + 1]);
    EXPECT_GE(k, 1) << what;
    EXPECT_LE(k, keys) << what;
    EXPECT_GT(v, keys) << what;
    EXPECT_LT(v, c.vocab) << what;
    EXPECT_FALSE(value_of.contains(k)) << what << ": key " << k << " twice";
    value_of[k] = v;
    where_key[k] = 2 * i;
  }
  // The query section: scored entries are values right after a key of the pairs, each key
  // queried once; everything else is the filler 0 (marked) or such a query key (marked).
  std::set<std::int32_t> queried;
  std::vector<std::int64_t> scored_positions;
  for (std::int64_t t = 2 * m; t < n; ++t) {
    if (s.tokens[t] < 0) continue;
    scored_positions.push_back(t);
    ASSERT_GT(t, 2 * m) << what;
    const std::int32_t key = id_of(s.tokens[t - 1]);
    EXPECT_LT(s.tokens[t - 1], 0) << what << ": a query key is not scored";
    ASSERT_TRUE(value_of.contains(key)) << what << ": position " << t - 1 << " holds " << key << ", not a key of the pairs";
    EXPECT_EQ(s.tokens[t], value_of[key]) << what << ": the value after query key " << key;
    EXPECT_EQ((t - 1 - 2 * m) % 2, 0) << what << ": queries sit on slot starts";
    EXPECT_TRUE(queried.insert(key).second) << what << ": key " << key << " queried twice";
  }
  EXPECT_EQ(static_cast<std::int64_t>(queried.size()), m) << what;
  for (std::int64_t t = 2 * m; t < n; ++t) {
    if (s.tokens[t] >= 0) continue;
    const bool query_key = t + 1 < n && s.tokens[t + 1] >= 0;
    if (!query_key) EXPECT_EQ(id_of(s.tokens[t]), 0) << what << ": filler at " << t;
  }
  // The targets are those positions, in order, with what the tokens say.
  ASSERT_EQ(scored_positions.size(), s.targets.size()) << what;
  for (std::size_t i = 0; i < s.targets.size(); ++i) {
    const data::MqarTarget& t = s.targets[i];
    EXPECT_EQ(t.position, scored_positions[i]) << what;
    EXPECT_EQ(t.value, s.tokens[t.position]) << what;
    EXPECT_EQ(t.key, id_of(s.tokens[t.position - 1])) << what;
    EXPECT_EQ(t.distance, t.position - 1 - where_key[t.key]) << what;
  }
}

TEST(MqarSequence, MatchesItsDefinition) {
  struct Case {
    std::int64_t seq_len, pairs;
    int vocab;
    double power;
  };
  // Tight fits (4m = n, 4m = n - 1), every key used (m = K), Zoology's sizes, uniform gaps.
  for (const Case c : {Case{255, 64, 8192, 0.01}, Case{256, 64, 8192, 0.01}, Case{64, 4, 9, 0.01},
                       Case{256, 8, 300, 1.0}, Case{100, 1, 3, 0.5}, Case{1023, 32, 1024, 0.01}}) {
    const data::MqarConfig config = config_of({c.pairs}, c.vocab, c.power);
    for (std::int64_t index : {0, 1, 7, 123456}) {
      const data::MqarSequence s = data::mqar_sequence(config, c.seq_len, 5, data::kStreamMqarTrain, index, c.pairs);
      expect_valid(s, config, c.seq_len, c.pairs,
                   str("seq_len ", c.seq_len, " pairs ", c.pairs, " vocab ", c.vocab, " index ", index));
    }
  }
}

TEST(MqarSequence, APureFunctionOfSeedStreamAndIndex) {
  const data::MqarConfig c = config_of({16}, 512, 0.01);
  const auto seq = [&](std::uint64_t seed, std::uint64_t stream, std::int64_t index) {
    return data::mqar_sequence(c, 128, seed, stream, index, 16).tokens;
  };
  EXPECT_EQ(seq(3, data::kStreamMqarTrain, 10), seq(3, data::kStreamMqarTrain, 10));
  EXPECT_NE(seq(3, data::kStreamMqarTrain, 10), seq(3, data::kStreamMqarTrain, 11));
  EXPECT_NE(seq(3, data::kStreamMqarTrain, 10), seq(4, data::kStreamMqarTrain, 10));
  EXPECT_NE(seq(3, data::kStreamMqarTrain, 10), seq(3, data::kStreamMqarVal, 10));
}

// power 1 spreads the queries uniformly over the slots; 0.01 pulls them towards the pairs.
TEST(MqarSequence, SmallPowerPutsQueriesNearThePairs) {
  const auto mean_distance = [](double power) {
    const data::MqarConfig c = config_of({8}, 256, power);
    double sum = 0;
    int count = 0;
    for (std::int64_t i = 0; i < 200; ++i)
      for (const data::MqarTarget& t : data::mqar_sequence(c, 512, 1, data::kStreamMqarVal, i, 8).targets)
        sum += static_cast<double>(t.distance), ++count;
    return sum / count;
  };
  const double near = mean_distance(0.01), uniform = mean_distance(1.0);
  // Uniform over 248 slots: a query lies about 250 tokens past the pairs on average.
  EXPECT_GT(uniform, 200.0);
  EXPECT_LT(near, 0.5 * uniform);
}

TEST(MqarSource, BatchesAreTheSequencesOfTheirRows) {
  data::MqarConfig c = config_of({2, 4, 8}, 64, 0.01);
  const data::MqarTrainSource source(c, 3, 40, 9, Device::cpu());
  const Tensor b = source.batch(5);
  ASSERT_EQ(b.shape(), (std::vector<std::int64_t>{3, 41}));
  const std::vector<std::int32_t> got = b.to_vector<std::int32_t>();
  std::set<std::int64_t> pairs_seen;
  for (std::int64_t r = 0; r < 3; ++r) {
    const std::int64_t n = 5 * 3 + r, m = data::mqar_train_pairs(c, 9, n);
    pairs_seen.insert(m);
    const data::MqarSequence s = data::mqar_sequence(c, 40, 9, data::kStreamMqarTrain, n, m);
    EXPECT_EQ(std::vector<std::int32_t>(got.begin() + r * 41, got.begin() + (r + 1) * 41), s.tokens) << "row " << r;
  }
  EXPECT_EQ(source.batch(5).to_vector<std::int32_t>(), got);
  EXPECT_NE(source.batch(6).to_vector<std::int32_t>(), got);
  // The training pairs counts come from the list, all of them over enough sequences.
  std::set<std::int64_t> all;
  for (std::int64_t n = 0; n < 100; ++n) all.insert(data::mqar_train_pairs(c, 9, n));
  EXPECT_EQ(all, (std::set<std::int64_t>{2, 4, 8}));

  c.val_sequences = 7;
  const data::MqarValidationSet val(c, 3, 40, Device::cpu());
  EXPECT_EQ(val.num_batches(), 3);
  EXPECT_EQ(val.num_windows(), 7);
  EXPECT_EQ(val.batch(2).size(0), 1);
  const std::vector<const data::MqarSequence*> rows = val.sequences(1);
  ASSERT_EQ(rows.size(), 3u);
  // Sequences 3, 4, 5: pairs[k mod 3].
  EXPECT_EQ(rows[0]->pairs, 2);
  EXPECT_EQ(rows[1]->pairs, 4);
  EXPECT_EQ(rows[2]->pairs, 8);
}

TEST(MqarConfig, ImpossibleSettingsAreConfigErrors) {
  const auto parse_error = [](const std::string& doc) {
    return testing::error_of([&] { train::parse_config(json::parse(doc)); });
  };
  EXPECT_EQ(parse_error(R"({"data": {"task": "mqar", "seq_len": 30, "mqar": {"pairs": [4, 8]}}})"),
            "config: data.mqar.pairs[1]: 8 pairs take 16 tokens and their 8 queries (a key and its value each) "
            "another 16: 32 tokens do not fit in a sequence of data.seq_len + 1 = 31 (at most 7 pairs)");
  EXPECT_EQ(parse_error(R"({"data": {"task": "mqar", "seq_len": 64, "mqar": {"pairs": [5], "vocab": 10}}})"),
            "config: data.mqar.pairs[0]: 5 pairs need 5 distinct keys, but data.mqar.vocab 10 has 4 (keys are "
            "1..(vocab - 1) / 2)");
  EXPECT_EQ(parse_error(R"({"data": {"task": "mqar", "mqar": {"vocab": 2}}})"),
            "config: data.mqar.vocab: expected an integer >= 3, got 2");
  EXPECT_EQ(parse_error(R"({"data": {"task": "mqar", "mqar": {"power": 0}}})"),
            "config: data.mqar.power: expected a number > 0, got 0");
  EXPECT_EQ(parse_error(R"({"data": {"task": "mqar"}, "model": {"vocab_size": 100}})"),
            "config: model.vocab_size: 100 is smaller than data.mqar.vocab (8192): leave it 0 to take the task's "
            "vocabulary");
  testing::expect_error([&] { train::parse_config(json::parse(R"({"data": {"task": "mqar"}, "evaluation": {"passkey": {"trials": 2}}})")); },
                        {"config: evaluation.passkey.trials: passkey retrieval prompts are text"});
  testing::expect_error([&] { train::parse_config(json::parse(R"({"data": {"task": "mqar"}, "evaluation": {"copy": {"trials": 2}}})")); },
                        {"config: evaluation.copy.trials: the copy task's lists are text"});
  testing::expect_error([&] { train::parse_config(json::parse(R"({"data": {"task": "mqar"}, "finetune": {"init_from": "runs/x"}})")); },
                        {"config: finetune.init_from: data.task mqar trains from scratch"});
  EXPECT_EQ(parse_error(R"({"data": {"task": "recall"}})"), "config: data.task: \"recall\" is not one of text, mqar");
  // The task's vocabulary sizes the model; text leaves it to the tokenizer.
  const train::RunConfig c =
      train::parse_config(json::parse(R"({"data": {"task": "mqar", "mqar": {"vocab": 300, "pairs": [4, 16]}}})"));
  EXPECT_EQ(c.model.vocab_size, 300);
  EXPECT_EQ(c.data.task, data::DataTask::mqar);
  EXPECT_EQ(train::parse_config(json::object()).model.vocab_size, 0);
  // The keys round-trip through the resolved config.
  EXPECT_EQ(train::to_json(c)["data"]["mqar"]["pairs"], json::parse("[4, 16]"));
  EXPECT_EQ(train::to_json(c)["data"]["task"], "mqar");
}

constexpr int kVocab = 41;

std::unique_ptr<nn::CausalLM> tiny_model() {
  nn::ModelConfig c;
  c.vocab_size = kVocab, c.d_model = 16, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.d_ff = 32;
  c.init_std = 0.3;
  c.max_seq_len = 128;
  c.dtype = DType::f64;
  return std::make_unique<nn::CausalLM>(c, attention::make_factory({}));
}

// The naive mean cross-entropy over scored targets only: full logits of forward() on the ids,
// -log_softmax per row in float64 on the host.
double naive_scored_loss(nn::CausalLM& model, const std::vector<std::int32_t>& marked, std::int64_t B, std::int64_t T) {
  std::vector<std::int32_t> inputs;
  for (std::int64_t r = 0; r < B; ++r)
    for (std::int64_t t = 0; t < T; ++t) inputs.push_back(id_of(marked[r * (T + 1) + t]));
  const std::vector<double> logits = testing::values(model.forward(Tensor::from_vector(inputs, {B, T})));
  double sum = 0;
  int count = 0;
  for (std::int64_t r = 0; r < B; ++r)
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int32_t target = marked[r * (T + 1) + t + 1];
      if (target < 0) continue;
      const double* row = &logits[(r * T + t) * kVocab];
      double top = row[0];
      for (int v = 1; v < kVocab; ++v) top = std::max(top, row[v]);
      double z = 0;
      for (int v = 0; v < kVocab; ++v) z += std::exp(row[v] - top);
      sum += top + std::log(z) - row[target];
      ++count;
    }
  return sum / count;
}

TEST(CausalLMScoredTargets, LossCountsOnlyScoredTargets) {
  auto model = tiny_model();
  NoGradGuard no_grad;
  model->train(false);
  const std::int64_t B = 3, T = 20;
  // Pseudo-random tokens, about a third of them scored.
  std::vector<std::int32_t> ids(B * (T + 1)), marked(B * (T + 1));
  std::uint64_t x = 77;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    ids[i] = static_cast<std::int32_t>((x >> 33) % kVocab);
    marked[i] = (x >> 60) % 3 == 0 ? ids[i] : -(ids[i] + 1);
  }
  const double got = model->loss(Tensor::from_vector(marked, {B, T + 1})).to(DType::f64).to_vector<double>()[0];
  const double want = naive_scored_loss(*model, marked, B, T);
  EXPECT_NEAR(got, want, 1e-10 * want);
  // Every target scored: the plain mean, which differs (so the marks are what changed it).
  const double all = model->loss(Tensor::from_vector(ids, {B, T + 1})).to(DType::f64).to_vector<double>()[0];
  EXPECT_NEAR(all, naive_scored_loss(*model, ids, B, T), 1e-10 * all);
  EXPECT_GT(std::abs(all - got), 1e-3);
  // Marked inputs are read as their ids.
  std::vector<std::int32_t> marked_inputs, plain_inputs;
  for (std::int64_t r = 0; r < B; ++r)
    for (std::int64_t t = 0; t < T; ++t)
      marked_inputs.push_back(marked[r * (T + 1) + t]), plain_inputs.push_back(ids[r * (T + 1) + t]);
  EXPECT_EQ(testing::values(model->forward(Tensor::from_vector(marked_inputs, {B, T}))),
            testing::values(model->forward(Tensor::from_vector(plain_inputs, {B, T}))));
}

TEST(MqarEvaluate, EvaluateAndRecallAccuracyMatchNaiveCounts) {
  auto model = tiny_model();
  data::MqarConfig c = config_of({2, 5}, kVocab, 0.3);
  c.val_sequences = 5;
  const std::int64_t seq_len = 40;
  const data::MqarValidationSet val(c, 2, seq_len, Device::cpu());
  // Naive: per scored target the full logits' argmax and -log_softmax.
  NoGradGuard no_grad;
  model->train(false);
  double loss = 0, hits = 0, tokens = 0;
  std::map<std::int64_t, std::pair<int, int>> by_pairs;  // pairs -> (queries, correct)
  std::map<int, std::pair<int, int>> by_bucket;
  for (std::int64_t b = 0; b < val.num_batches(); ++b) {
    const std::vector<const data::MqarSequence*> rows = val.sequences(b);
    for (const data::MqarSequence* s : rows) {
      std::vector<std::int32_t> inputs;
      for (std::int64_t t = 0; t < seq_len; ++t) inputs.push_back(id_of(s->tokens[t]));
      const std::vector<double> logits = testing::values(model->forward(Tensor::from_vector(inputs, {1, seq_len})));
      for (const data::MqarTarget& t : s->targets) {
        const double* row = &logits[(t.position - 1) * kVocab];
        int best = 0;
        for (int v = 1; v < kVocab; ++v)
          if (row[v] > row[best]) best = v;
        double z = 0;
        for (int v = 0; v < kVocab; ++v) z += std::exp(row[v] - row[best]);
        loss += row[best] + std::log(z) - row[t.value];
        hits += best == t.value, tokens += 1;
        by_pairs[s->pairs].first += 1, by_pairs[s->pairs].second += best == t.value;
        const int bucket = t.distance <= 16 ? 0 : t.distance <= 32 ? 1 : 2;
        by_bucket[bucket].first += 1, by_bucket[bucket].second += best == t.value;
      }
    }
  }
  ASSERT_EQ(tokens, 2 + 5 + 2 + 5 + 2);  // sequences 0..4 have 2, 5, 2, 5, 2 pairs
  const train::EvalMetrics m = train::evaluate(*model, val, 0);
  EXPECT_EQ(m.tokens, 16);
  EXPECT_NEAR(m.loss, loss / tokens, 1e-10 * loss / tokens);
  EXPECT_DOUBLE_EQ(m.accuracy, hits / tokens);

  const train::MqarReport r = train::evaluate_mqar(*model, val);
  EXPECT_EQ(r.all.queries, 16);
  EXPECT_EQ(r.all.correct, static_cast<std::int64_t>(hits));
  ASSERT_EQ(r.by_pairs.size(), 2u);
  EXPECT_EQ(r.by_pairs[0].name, "2");
  EXPECT_EQ(r.by_pairs[0].queries, by_pairs[2].first);
  EXPECT_EQ(r.by_pairs[0].correct, by_pairs[2].second);
  EXPECT_EQ(r.by_pairs[1].queries, by_pairs[5].first);
  EXPECT_EQ(r.by_pairs[1].correct, by_pairs[5].second);
  std::int64_t seen = 0;
  for (const train::MqarCount& bucket : r.by_distance) {
    const auto& names = train::mqar_distance_buckets();
    const int i = static_cast<int>(std::find(names.begin(), names.end(), bucket.name) - names.begin());
    EXPECT_EQ(bucket.queries, by_bucket[i].first) << bucket.name;
    EXPECT_EQ(bucket.correct, by_bucket[i].second) << bucket.name;
    seen += bucket.queries;
  }
  EXPECT_EQ(seen, 16);
  const json j = train::mqar_json(r);
  EXPECT_EQ(j["queries"], 16);
  EXPECT_EQ(j["by_pairs"]["5"]["queries"], by_pairs[5].first);
}

TEST(MqarEvaluate, DistanceBuckets) {
  EXPECT_EQ(train::mqar_distance_bucket(1), 0);
  EXPECT_EQ(train::mqar_distance_bucket(16), 0);
  EXPECT_EQ(train::mqar_distance_bucket(17), 1);
  EXPECT_EQ(train::mqar_distance_bucket(64), 2);
  EXPECT_EQ(train::mqar_distance_bucket(65), 3);
  EXPECT_EQ(train::mqar_distance_bucket(4096), 8);
  EXPECT_EQ(train::mqar_distance_bucket(4097), 9);
  EXPECT_EQ(train::mqar_distance_buckets()[3], "65-128");
}

namespace fs = std::filesystem;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// A tiny MQAR run: no corpus, nothing but the config.
json mqar_run_config(const testing::TempDir& tmp, const std::string& run) {
  return json::parse(str(R"({
    "model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
    "data": {"task": "mqar", "seq_len": 48, "mqar": {"pairs": [2, 6], "vocab": 40, "val_sequences": 10}},
    "optimizer": {"lr": 0.01},
    "schedule": {"warmup_steps": 2},
    "training": {"steps": 6, "batch_size": 4, "eval_interval": 3, "eval_batches": 2, "checkpoint_interval": 3,
                 "log_interval": 3},
    "output": {"dir": ")", tmp / run, R"("},
    "seed": 3
  })"));
}

// A run trains from the config alone, reports MQAR at every evaluation and writes mqar.json
// (the final evaluation's); the text sample is skipped; a resumed run continues.
TEST(MqarRun, TrainsAndReportsRecallAtEveryEvaluation) {
  testing::TempDir tmp;
  const train::TrainResult r = train::train(train::parse_config(mqar_run_config(tmp, "run")), {});
  EXPECT_EQ(r.steps, 6);
  EXPECT_FALSE(fs::exists(tmp / "run/sample.txt"));
  std::vector<json> evals;
  std::ifstream in(tmp / "run/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (json j = json::parse(line); j.contains("mqar")) evals.push_back(j);
  ASSERT_EQ(evals.size(), 2u);  // steps 3 and 6
  const json file = read_json(tmp / "run/mqar.json");
  EXPECT_EQ(file["task"], "mqar");
  EXPECT_EQ(file["step"], 6);
  EXPECT_EQ(file["queries"], 2 * 5 + 6 * 5);  // 10 sequences, half with 2 pairs, half with 6
  EXPECT_EQ(file["queries"], evals.back()["mqar"]["queries"]);
  EXPECT_EQ(file["correct"], evals.back()["mqar"]["correct"]);
  EXPECT_EQ(file["by_pairs"][1]["pairs"], 6);
  EXPECT_EQ(file["by_pairs"][1]["queries"], 30);
  // eval_tokens counts the scored recalls of the batches read (2 batches of 4: 2+6+2+6+2+6+2+6).
  EXPECT_EQ(evals.back()["eval_tokens"], 32);
  // --resume continues from the final checkpoint (which carries no tokenizer) to a longer run.
  json more = mqar_run_config(tmp, "run");
  more["training"]["steps"] = 9;
  const train::TrainResult resumed = train::train(train::parse_config(more), {.resume = true});
  EXPECT_EQ(resumed.steps, 9);
  EXPECT_EQ(read_json(tmp / "run/mqar.json")["step"], 9);
  // The text commands (eval, generate, passkey, copy) find no tokenizer, and say why.
  const formats::CheckpointData ck = formats::load_checkpoint(*formats::latest_checkpoint(tmp / "run"));
  EXPECT_EQ(ck.state["task"], "mqar");
  testing::expect_error([&] { train::checkpoint_tokenizer(ck, train::parse_config(more), "run"); },
                        {"run was trained on the synthetic MQAR task (data.task mqar): it has no tokenizer"});
}

// Batches are a pure function of (seed, index): a run stopped at its step-3 checkpoint and
// resumed gives the uninterrupted run's losses, bit for bit.
TEST(MqarRun, ResumeReproducesTheUninterruptedLosses) {
  testing::TempDir tmp;
  train::train(train::parse_config(mqar_run_config(tmp, "whole")), {});
  json first = mqar_run_config(tmp, "parts");
  first["training"]["steps"] = 3;
  first["schedule"]["warmup_steps"] = 2;
  train::train(train::parse_config(first), {});
  train::train(train::parse_config(mqar_run_config(tmp, "parts")), {.resume = true});
  const auto loss_of = [](const fs::path& run) {
    std::map<std::int64_t, double> out;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (json j = json::parse(line); j.contains("loss") && !j.contains("skipped")) out[j["step"]] = j["loss"];
    return out;
  };
  const std::map<std::int64_t, double> whole = loss_of(tmp / "whole"), parts = loss_of(tmp / "parts");
  ASSERT_EQ(whole.size(), 6u);
  EXPECT_EQ(whole, parts);
}

// A sweep's summary rows carry each point's MQAR accuracy and the report has its tables.
TEST(MqarRun, SweepSummaryAndReport) {
  testing::TempDir tmp;
  json base = mqar_run_config(tmp, "unused");
  base.erase("output");
  testing::write_text(tmp / "base.json", base.dump(2));
  const json sweep = {{"base", "base.json"},
                      {"axes", {{"attention.kind", {"softmax", "performer"}}}},
                      {"seeds", {1, 2}},
                      {"output", tmp / "out"}};
  testing::write_text(tmp / "sweep.json", sweep.dump(2));
  experiments::SweepOptions options;
  options.jobs = 2;
  options.executable = DARKFORMER_EXE;
  const json summary = experiments::run_sweep(experiments::plan_sweep(tmp.path() / "sweep.json"), options);
  ASSERT_EQ(summary["points"].size(), 4u);
  for (const json& row : summary["points"]) {
    ASSERT_EQ(row["status"], "done") << row;
    const json file = read_json(fs::path(row["dir"].get<std::string>()) / "mqar.json");
    EXPECT_EQ(row["mqar"]["accuracy"], file["accuracy"]) << row;
    EXPECT_EQ(row["mqar"]["by_pairs"]["6"], file["by_pairs"][1]["accuracy"]) << row;
  }
  const std::string md = [&] {
    std::ifstream in(experiments::write_report(tmp.path() / "out").markdown);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  EXPECT_NE(md.find("## Associative recall (MQAR)"), std::string::npos) << md;
  EXPECT_NE(md.find("| kind \\ pairs | 2 | 6 | all |"), std::string::npos) << md;
  EXPECT_NE(md.find("| kind \\ distance | 1-16 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| softmax | "), std::string::npos) << md;
}

}  // namespace
}  // namespace dark::mqar_test
