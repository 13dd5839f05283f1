// The attention kinds through train(): a tiny byte-level model of each kind (and a mix of
// kinds by per-layer overrides) learns a small text; a resumed run redraws the same
// features at the same steps and restores the variance-optimal proposal, so its loss curve
// equals the uninterrupted one bit for bit; every redraw is recorded with its held-out shock,
// equal to an evaluation of the checkpoint under the old and the new features, and log steps
// carry each layer's attention statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/file_io.h"
#include "tests/test_util.h"
#include "tests/train_test_util.h"
#include "train/attention_state.h"
#include "train/formats/checkpoint.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/model_builder.h"
#include "train/experiments/probe.h"
#include "train/metrics/run_metrics.h"
#include "train/trainer.h"

namespace dark::train {
namespace {

using dark::testing::TempDir;
namespace fs = std::filesystem;

nlohmann::json with_attention(nlohmann::json config, const nlohmann::json& attention) {
  config["attention"] = attention;
  config["training"]["generate_tokens"] = 0;
  return config;
}

struct KindCase {
  const char* name;
  nlohmann::json attention;
};

TEST(AttentionTraining, EveryKindLearnsASmallText) {
  const std::vector<KindCase> cases = {
      {"performer", {{"kind", "performer"}, {"num_features", 32}, {"redraw_interval", 25}}},
      {"lfk", {{"kind", "lfk"}, {"num_features", 32}}},
      {"darkformer", {{"kind", "darkformer"}, {"num_features", 32}}},
      {"darkformer_whiten_vo",
       {{"kind", "darkformer"}, {"num_features", 32}, {"proposal", "variance_optimal"},
        {"darkformer", {{"init", "whiten"}, {"rank", 8}, {"scope", "layer"}}}}},
      {"mixed", {{"kind", "performer"}, {"num_features", 32}, {"layers", {{"0", {{"kind", "softmax"}}}}}}},
  };
  for (const KindCase& c : cases) {
    TempDir tmp;
    const TrainResult r = train(parse_config(with_attention(tiny_config(tmp, c.name, 80), c.attention)), {});
    // Uniform guessing costs ln(258) = 5.55 nats; measured after 80 steps: 2.72 (mixed) to 2.79.
    EXPECT_LT(r.final_eval.loss, 3.2) << c.name;
    EXPECT_GT(r.final_eval.accuracy, 0.15) << c.name;
    RecordProperty(std::string("val_loss_") + c.name, std::to_string(r.final_eval.loss));
  }
}

TEST(AttentionTraining, ResumeRedrawsTheSameFeaturesAndRestoresTheProposal) {
  const nlohmann::json attention = {{"kind", "darkformer"},     {"num_features", 16},
                                    {"redraw_interval", 3},     {"proposal", "variance_optimal"},
                                    {"darkformer", {{"init", "whiten"}}}};
  TempDir tmp;
  train(parse_config(with_attention(tiny_config(tmp, "full", 20), attention)), {});
  const fs::path ten = tmp.path() / "full/checkpoints" / formats::checkpoint_name(10);
  EXPECT_TRUE(fs::exists(ten / "attention.safetensors"));
  const formats::CheckpointData ck = formats::load_checkpoint(ten);
  EXPECT_EQ(ck.state.at("feature_epochs"), nlohmann::json({3, 3}));  // last step taken: index 9, 9 / 3 = 3
  EXPECT_EQ(ck.attention.size(), 4u);  // sqrt_cov and log_det per layer

  fs::copy(tmp.path() / "full", tmp.path() / "cut", fs::copy_options::recursive);
  fs::remove_all(tmp.path() / "cut/checkpoints" / formats::checkpoint_name(20));
  TrainOptions resume;
  resume.resume = true;
  train(parse_config(with_attention(tiny_config(tmp, "cut", 20), attention)), resume);
  const auto a = losses(tmp.path() / "full"), b = losses(tmp.path() / "cut");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (std::int64_t step = 1; step <= 20; ++step) EXPECT_EQ(a.at(step), b.at(step)) << "step " << step;  // bitwise
}

TEST(AttentionTraining, RedrawsAreRecordedWithTheShockOfTheFeaturesAlone) {
  TempDir tmp;
  nlohmann::json config =
      with_attention(tiny_config(tmp, "run", 12), {{"kind", "performer"}, {"num_features", 8}, {"redraw_interval", 5}});
  config["stability"] = {{"redraw_eval_batches", 1}};
  config["training"]["checkpoint_interval"] = 5;
  config["training"]["keep_checkpoints"] = 0;
  config["training"]["log_interval"] = 4;
  train(parse_config(config), {});
  const metrics::RunMetrics m = metrics::read_metrics(tmp.path() / "run/metrics.jsonl");
  // Steps 1-5 train with epoch 0, 6-10 with epoch 1, 11-12 with epoch 2.
  ASSERT_EQ(m.redraws.size(), 2u);
  EXPECT_EQ(m.redraws[0].step, 6);
  EXPECT_EQ(m.redraws[1].step, 11);
  // The reference: the step-10 checkpoint's weights on validation batch 0 under epochs 1 and 2.
  const formats::CheckpointData ck = formats::load_checkpoint(tmp.path() / "run/checkpoints" / formats::checkpoint_name(10));
  const RunConfig resolved = parse_config(ck.state.at("config"));
  auto model = build_model(resolved);
  load_trained_state(*model, ck, resolved, "test");
  const data::PreparedData data = data::open_prepared(resolved.data.dir);
  const data::ValidationSet val(data.open_shard(data::Split::val), resolved.training.batch_size, resolved.data.seq_len,
                                resolved.data.val_windows);
  const std::vector<std::int64_t> intervals = redraw_intervals(resolved);
  set_feature_epochs(*model, intervals, 9);
  EXPECT_EQ(evaluate(*model, val, 1).loss, m.redraws[1].held_out_before);
  set_feature_epochs(*model, intervals, 10);
  EXPECT_EQ(evaluate(*model, val, 1).loss, m.redraws[1].held_out_after);
  EXPECT_NE(m.redraws[1].held_out_before, m.redraws[1].held_out_after);  // other features, another estimate
  // stability.json summarises them.
  const auto stability = nlohmann::json::parse(read_file(tmp.path() / "run/stability.json"));
  EXPECT_EQ(stability["redraw_shocks"]["redraws"], 2);
  EXPECT_DOUBLE_EQ(stability["redraw_shocks"]["worst_held_out_jump"].get<double>(),
                   std::max(m.redraws[0].held_out_after - m.redraws[0].held_out_before,
                            m.redraws[1].held_out_after - m.redraws[1].held_out_before));
  // Log steps 4, 8, 12 carry both layers' statistics.
  ASSERT_EQ(m.attention.size(), 3u);
  EXPECT_EQ(m.attention[2].step, 12);
  for (const metrics::AttentionStatsRecord& a : m.attention) {
    ASSERT_EQ(a.layers.size(), 2u);
    for (const nn::AttentionStats& s : a.layers) {
      EXPECT_GT(s.sq_norm_p99, s.sq_norm_p50);
      EXPECT_GT(s.sq_norm_p50, 0);
      EXPECT_GT(s.logit_sd_p50, 0);
    }
  }
}

TEST(AttentionTraining, KindsThatDoNotRedrawRecordNoRedraws) {
  TempDir tmp;
  train(parse_config(with_attention(tiny_config(tmp, "run", 12),
                                    {{"kind", "lfk"}, {"num_features", 8}, {"redraw_interval", 5}})),
        {});
  EXPECT_TRUE(metrics::read_metrics(tmp.path() / "run/metrics.jsonl").redraws.empty());
  const auto stability = nlohmann::json::parse(read_file(tmp.path() / "run/stability.json"));
  EXPECT_TRUE(stability["redraw_shocks"]["nominal"].get<bool>());  // the control: steps 6 and 11
  EXPECT_EQ(stability["redraw_shocks"]["shocks"].size(), 2u);
}

const experiments::ProbeRow& pooled_row(const experiments::ProbeReport& report, const std::string& method, std::int64_t m) {
  for (const experiments::ProbeRow& r : report.rows)
    if (r.layer < 0 && r.head < 0 && r.method == method && r.features == m) return r;
  throw Error(str("no pooled row for ", method, " m = ", m));
}

TEST(AttentionTraining, ProbeMeasuresEveryEstimatorOnATrainedModel) {
  TempDir tmp;
  train(parse_config(with_attention(tiny_config(tmp, "run", 40), {{"kind", "darkformer"}, {"num_features", 16}})), {});
  const formats::CheckpointData ck = formats::load_checkpoint(tmp.path() / "run/checkpoints" / formats::checkpoint_name(40));
  const RunConfig config = parse_config(ck.state.at("config"));  // resolved: vocab_size set
  auto model = build_model(config);
  load_trained_state(*model, ck, config, "test");
  experiments::ProbeOptions o;
  o.batches = 1;
  o.features = {4, 64};
  o.redraws = 3;
  o.calibration_batches = 1;
  const experiments::ProbeReport report = experiments::run_probe(*model, config, data::open_prepared(config.data.dir), o);
  for (const char* method : {"performer", "darkformer_identity", "darkformer_whiten", "darkformer_learned", "lfk"})
    for (std::int64_t m : o.features) {
      const experiments::ProbeRow& r = pooled_row(report, method, m);
      EXPECT_GT(r.swap.count, 0) << method;
      EXPECT_LE(r.swap.median, r.swap.p90) << method;
      EXPECT_LE(r.swap.p90, r.swap.p99) << method;
      EXPECT_EQ(r.has_monte_carlo, std::string(method) != "lfk") << method;
    }
  // M = I is Performer with the same draws: the same numbers.
  EXPECT_EQ(pooled_row(report, "performer", 4).monte_carlo.mean, pooled_row(report, "darkformer_identity", 4).monte_carlo.mean);
  // The estimator's error shrinks with more features (~1/sqrt(m)); for performer the exact
  // kernel is softmax itself, so its Monte Carlo and swap errors coincide.
  for (const char* method : {"performer", "darkformer_whiten", "darkformer_learned"})
    EXPECT_LT(pooled_row(report, method, 64).monte_carlo.mean, 0.6 * pooled_row(report, method, 4).monte_carlo.mean) << method;
  EXPECT_DOUBLE_EQ(pooled_row(report, "performer", 64).monte_carlo.mean, pooled_row(report, "performer", 64).swap.mean);
  // Per layer and per head rows, and JSON for every row.
  EXPECT_EQ(report.to_json()["rows"].size(), report.rows.size());
  EXPECT_NE(report.table().find("layer 1"), std::string::npos);
}

TEST(AttentionTraining, ProbeMeasuresEveryEstimatorWithAndWithoutTheExactWindow) {
  TempDir tmp;
  train(parse_config(with_attention(tiny_config(tmp, "run", 10), {{"kind", "darkformer"}, {"num_features", 16}})), {});
  const formats::CheckpointData ck = formats::load_checkpoint(tmp.path() / "run/checkpoints" / formats::checkpoint_name(10));
  const RunConfig config = parse_config(ck.state.at("config"));
  auto model = build_model(config);
  load_trained_state(*model, ck, config, "test");
  const data::PreparedData data = data::open_prepared(config.data.dir);
  experiments::ProbeOptions o;
  o.batches = 1;
  o.features = {8};
  o.redraws = 2;
  o.calibration_batches = 1;
  const experiments::ProbeReport without = experiments::run_probe(*model, config, data, o);
  for (const experiments::ProbeRow& r : without.rows) EXPECT_EQ(r.method.find("+window"), std::string::npos) << r.method;
  const char* methods[] = {"performer", "darkformer_identity", "darkformer_whiten", "performer_var_opt",
                           "darkformer_learned", "lfk"};
  // A window of a quarter of the sequence (8 of 32 tokens): the same estimators, the nearest
  // keys exact; the rows without it are the same numbers as in a probe without a window. The
  // swap error shrinks too where the kernel is softmax (not for a whitened or learned M).
  o.exact_window = 8;
  const experiments::ProbeReport quarter = experiments::run_probe(*model, config, data, o);
  EXPECT_EQ(quarter.rows.size(), 2 * without.rows.size());
  for (const std::string method : methods) {
    const experiments::ProbeRow& plain = pooled_row(quarter, method, 8);
    const experiments::ProbeRow& windowed = pooled_row(quarter, method + " +window8", 8);
    EXPECT_EQ(plain.swap.mean, pooled_row(without, method, 8).swap.mean) << method;
    EXPECT_EQ(windowed.swap.count, plain.swap.count) << method;
    EXPECT_EQ(windowed.has_monte_carlo, plain.has_monte_carlo) << method;
    if (plain.has_monte_carlo) EXPECT_LT(windowed.monte_carlo.mean, plain.monte_carlo.mean) << method;
    if (method.find("darkformer_whiten") == std::string::npos && method != "darkformer_learned")
      EXPECT_LT(windowed.swap.mean, plain.swap.mean) << method;
  }
  EXPECT_NE(quarter.table().find("darkformer_identity +window8"), std::string::npos);
  EXPECT_EQ(quarter.to_json()["rows"].size(), quarter.rows.size());
  // A window over the whole sequence makes attention exact: no Monte Carlo error left, and for
  // performer (whose kernel is softmax) no swap error either.
  o.exact_window = static_cast<int>(config.data.seq_len);
  const experiments::ProbeReport whole = experiments::run_probe(*model, config, data, o);
  const std::string suffix = " +window" + std::to_string(config.data.seq_len);
  for (const std::string method : methods) {
    const experiments::ProbeRow& r = pooled_row(whole, method + suffix, 8);
    if (r.has_monte_carlo) EXPECT_LT(r.monte_carlo.p99, 1e-5) << method;
  }
  EXPECT_LT(pooled_row(whole, "performer" + suffix, 8).swap.p99, 1e-5);
}

TEST(AttentionTraining, ProbeGivesTheModelItsKernelsBackWhenAForwardThrows) {
  TempDir tmp;
  RunConfig config = parse_config(with_attention(tiny_config(tmp, "probe", 10), {{"kind", "performer"}, {"num_features", 8}}));
  const data::PreparedData data = prepare_data_for(config);
  config.model.vocab_size = 64;  // the text's byte ids reach 'z' = 122: the embedding rejects them
  auto model = build_model(config);
  const std::vector<nn::AttentionKernel*> kernels = model->attention_kernels();
  experiments::ProbeOptions o;
  o.batches = 1;
  o.features = {4};
  o.redraws = 1;
  o.calibration_batches = 1;
  EXPECT_THROW(experiments::run_probe(*model, config, data, o), Error);
  EXPECT_EQ(model->attention_kernels(), kernels);  // not the probe's recording wrappers
  EXPECT_STREQ(model->attention_kernels()[0]->kind(), "performer");
}

}  // namespace
}  // namespace dark::train
