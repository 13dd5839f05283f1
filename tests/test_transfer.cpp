// Attention transfer (finetune.transfer, train/swap/transfer.h): the fitted layers move toward the
// source's exact attention, measured here against an independent reference (a naive softmax
// over the source model's own queries, keys and values, not the transfer's recorded targets,
// so a transfer that fitted the wrong target fails); a transfer-only run (training.steps 0)
// writes a run folder that finetuning starts from; a resumed run does not redo the transfer;
// bad settings are errors that say what to do.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <numeric>
#include <thread>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/file_io.h"
#include "data/prepare.h"
#include "tests/child_process.h"
#include "tests/test_util.h"
#include "tests/train_test_util.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/swap/finetune.h"
#include "train/formats/checkpoint.h"
#include "train/model_builder.h"
#include "train/stop_signal.h"
#include "train/trainer.h"
#include "train/training_run.h"
#include "train/swap/attention_error.h"
#include "train/swap/kernel_scope.h"
#include "train/swap/transfer.h"

namespace dark::train::transfer_test {  // its own namespace: unity batches join test files
namespace {

using dark::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

// Causal softmax attention written out: q (B, T, Hq, D), k, v (B, T, Hkv, D), query head h on
// kv head h / (Hq / Hkv); window > 0: query t sees keys t - window < j <= t only.
Tensor naive_softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t window = 0) {
  const std::int64_t B = q.size(0), T = q.size(1), Hq = q.size(2), Hkv = k.size(2), D = q.size(3);
  const std::vector<double> qv = q.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> kv = k.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> vv = v.to(DType::f64).contiguous().to_vector<double>();
  std::vector<double> out(qv.size(), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t g = h / (Hq / Hkv);
        std::vector<double> s;
        double top = -1e300;
        for (std::int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += qv[((b * T + t) * Hq + h) * D + d] * kv[((b * T + j) * Hkv + g) * D + d];
          const bool seen = window == 0 || t - j < window;
          s.push_back(seen ? dot / std::sqrt(static_cast<double>(D)) : -1e300);
          top = std::max(top, s.back());
        }
        double z = 0;
        for (double& x : s) z += (x = x > -1e299 ? std::exp(x - top) : 0.0);
        for (std::int64_t j = 0; j <= t; ++j)
          for (std::int64_t d = 0; d < D; ++d)
            out[((b * T + t) * Hq + h) * D + d] += s[j] / z * vv[((b * T + j) * Hkv + g) * D + d];
      }
  return Tensor::from_vector(out, q.shape());
}

// What the source computes at every layer on `ids`: the layer's input (the source's stream)
// and its queries, keys and values.
struct SourceLayers {
  std::vector<Tensor> input;
  std::vector<RecordingKernel::Inputs> qkv;
};
SourceLayers record_source(nn::CausalLM& source, const Tensor& ids) {
  NoGradGuard no_grad;
  SourceLayers out;
  out.input.resize(source.model.layers.size());
  for (std::size_t i = 0; i < out.input.size(); ++i)
    source.model.layers[i]->self_attn.input_observer = [&out, i](const Tensor& x) { out.input[i] = x.detach(); };
  {
    KernelScope<RecordingKernel> scope(source, every_layer(source));
    source.forward(ids);
    for (RecordingKernel* r : scope.at) out.qkv.push_back(r->seen.at(0));
  }
  for (auto& layer : source.model.layers) layer->self_attn.input_observer = nullptr;
  return out;
}

// Per layer, every (batch, position, head) row's |kernel(q, k, v) - softmax_source| /
// |softmax_source|: the swapped layer's kernel on its own projections of the source's stream,
// against a naive softmax over the source's own q, k, v; at feature epoch `epoch`.
std::vector<std::vector<double>> layer_row_errors(nn::CausalLM& source, nn::CausalLM& swapped, const Tensor& ids,
                                                  std::int64_t epoch) {
  NoGradGuard no_grad;
  const SourceLayers src = record_source(source, ids);
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < src.input.size(); ++i) {
    nn::SelfAttention& layer = swapped.model.layers[i]->self_attn;
    const RecordingKernel::Inputs& in = src.qkv[i];
    const Tensor want = naive_softmax_attention(in.q, in.k, in.v, swapped.config().window_of(static_cast<int>(i)));
    const nn::SelfAttention::Heads h = layer.project(src.input[i], 0);
    layer.kernel->set_feature_epoch(epoch);
    out.push_back(row_relative_errors(layer.kernel->forward(h.q, h.k, h.v), want));
  }
  return out;
}

double mean_of(const std::vector<double>& x) { return std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size()); }

json transfer_config(const TempDir& tmp, const std::string& run, int steps, const fs::path& init_from,
                     const json& attention, const json& transfer) {
  json config = finetune_config(tmp, run, steps, init_from, attention, {"limited_attention"});
  config["finetune"]["transfer"] = transfer;
  config["schedule"]["warmup_steps"] = 0;
  return config;
}

// The model of `config` with a checkpoint's weights (or the source's, for the swap before any
// transfer), in eval mode.
std::unique_ptr<nn::CausalLM> model_from(const RunConfig& config, const std::map<std::string, Tensor>& weights) {
  auto model = build_model(config);
  NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters())
    if (weights.contains(name)) p->copy_(weights.at(name));
  model->train(false);
  return model;
}

// A briefly trained tiny model with its attention made as peaked as a pretrained model's
// (where random features are poor): its query and key projections scaled by 4 (logits 16x
// larger); with QK-norm (Gemma's family) the norms' weights instead. `model` patches the tiny
// config's model section (Gemma 3's shape: GQA, QK-norm, sliding windows).
fs::path peaked_source(const TempDir& tmp, const json& model = json::object(), const std::string& name = "peaked") {
  json config = quiet(tiny_config(tmp, "pretrain-" + name, 10));
  config["model"].merge_patch(model);
  train(parse_config(config), {});
  formats::CheckpointData ck =
      formats::load_checkpoint(tmp.path() / ("pretrain-" + name) / "checkpoints" / formats::checkpoint_name(10));
  const bool qk_norm = model.value("family", "llama") == "gemma3";
  for (auto& [n, t] : ck.model)
    if (qk_norm ? n.ends_with("q_norm.weight") || n.ends_with("k_norm.weight")
                : n.ends_with("q_proj.weight") || n.ends_with("k_proj.weight"))
      t = mul_scalar(t, 4.0);
  formats::save_checkpoint(tmp.path() / name, ck, 0);
  return tmp.path() / name;
}

// Gemma 3's shape in miniature: 4 query heads on 1 key/value head, QK-norm, a sliding-window
// layer (0, window 8) and a global one (1).
const json kGemmaShape = {{"family", "gemma3"},      {"d_model", 32},          {"n_heads", 4},
                          {"n_kv_heads", 1},         {"head_dim", 8},          {"mlp", "geglu_tanh"},
                          {"sliding_window", 8},     {"sliding_window_pattern", 2}};

// Mean and median as the transfer reports them (train/swap/attention_error.h), computed here.
std::pair<double, double> mean_and_median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return {mean_of(x), x[x.size() / 2]};
}

// The transfer, checked against an independent reference: every swapped layer's errors
// before and after, recomputed here from the source's own q, k, v (a naive softmax with GQA and
// the sliding window) and the swapped layer's kernel on its own projections of the source's
// stream, equal what transfer.json reports, at feature epoch 0 and not at a draw the transfer
// trained with (epochs 1, 2, ...): the held-out draw is held out. Each layer gets closer to its
// source in the quantities the fit minimises (the output term, the attention KL) and none goes
// silent. Gemma's shape (GQA 4:1, QK-norm, windows, `qk`) is one of the cases.
TEST(AttentionTransfer, EveryLayerMovesTowardTheSourcesExactAttentionOnHeldOutBatchesAndDraw) {
  TempDir tmp;
  struct Case {
    std::string name;
    json model, attention, trainable;
  };
  const std::vector<Case> cases = {
      {"darkformer", json::object(), {{"kind", "darkformer"}, {"num_features", 16}}, {"feature_map"}},
      {"performer-window", json::object(), {{"kind", "performer"}, {"num_features", 16}, {"exact_window", 4}}, {"qk"}},
      {"gemma-darkformer-window", kGemmaShape,
       {{"kind", "darkformer"}, {"num_features", 16}, {"exact_window", 4}, {"windowed_layers", "same"}}, {"qk"}},
  };
  for (std::int64_t s = 0; s < 1000; ++s) ASSERT_GE(transfer_feature_epoch(s, 10), 1) << "step " << s << " trains on the held-out draw";
  for (const Case& c : cases) {
    const fs::path source_run = peaked_source(tmp, c.model, "source-" + c.name);
    const auto source_weights = formats::load_checkpoint(formats::find_checkpoint(source_run)).model;
    const json transfer = {{"steps", 40}, {"lr", 0.01}, {"trainable", c.trainable}, {"redraw_interval", 5}};
    const RunConfig config = parse_config(transfer_config(tmp, "transfer-" + c.name, 0, source_run, c.attention, transfer));
    train(config, {});
    const fs::path run = tmp.path() / ("transfer-" + c.name);
    ASSERT_TRUE(fs::exists(run / "checkpoints" / formats::checkpoint_name(0))) << c.name;
    const json report = json::parse(read_file(run / "transfer.json"));
    EXPECT_EQ(report["steps"], 40);
    EXPECT_GT(report["peak_resident_mib"].get<double>(), 1.0) << c.name;
    ASSERT_EQ(report["layers"].size(), 2u);
    EXPECT_EQ(report["collapsed_layers"], 0) << c.name;

    RunConfig softmax = config;
    softmax.attention = attention::AttentionConfig{};
    softmax.model = parse_config(json::parse(read_file(run / "config.json"))).model;
    RunConfig swapped = softmax;
    swapped.attention = config.attention;
    auto source = model_from(softmax, source_weights);
    auto at_swap = model_from(swapped, source_weights);
    auto after = model_from(swapped, formats::load_checkpoint(run / "checkpoints" / formats::checkpoint_name(0)).model);
    const data::PreparedData data = data::open_prepared(config.data.dir);
    const data::ValidationSet val(data.open_shard(data::Split::val), config.training.batch_size, config.data.seq_len,
                                  config.data.val_windows, Device::cpu(), data.window_bos_id, config.data.windows);
    // The language-model cost of the swap, before the transfer: the swapped source evaluated here.
    const EvalMetrics swap_eval = evaluate(*at_swap, val, config.training.eval_batches);
    EXPECT_NEAR(report["validation_at_swap"]["loss"].get<double>(), swap_eval.loss, 1e-4 * swap_eval.loss) << c.name;
    EXPECT_EQ(report["validation_at_swap"]["tokens"].get<std::int64_t>(), swap_eval.tokens) << c.name;

    // Every row of the batches the transfer measured on (finetune.transfer.eval_batches: 2).
    const auto rows_of = [&](nn::CausalLM& model, std::int64_t epoch) {
      std::vector<std::vector<double>> per_layer(2);
      for (std::int64_t b = 0; b < 2; ++b) {
        const Tensor tokens = val.batch(b);
        const auto e = layer_row_errors(*source, model, core::slice(tokens, 1, 0, tokens.size(1) - 1).contiguous(), epoch);
        for (std::size_t l = 0; l < 2; ++l) per_layer[l].insert(per_layer[l].end(), e[l].begin(), e[l].end());
      }
      return per_layer;
    };
    const auto before = rows_of(*at_swap, 0), held_out = rows_of(*after, 0), trained_draw = rows_of(*after, 1);
    const auto objective = [&](const json& fit) {
      return config.finetune.transfer.output_weight * fit["output_error"].get<double>() +
             config.finetune.transfer.attention_weight * fit["attention_kl"].get<double>();
    };
    double objective_before = 0, objective_after = 0;
    for (std::size_t l = 0; l < 2; ++l) {
      const json& layer = report["layers"][l];
      const std::string where = c.name + " layer " + std::to_string(l);
      const auto [before_mean, before_median] = mean_and_median(before[l]);
      const auto [after_mean, after_median] = mean_and_median(held_out[l]);
      EXPECT_NEAR(layer["error_before"]["mean"].get<double>(), before_mean, 2e-5) << where;
      EXPECT_NEAR(layer["error_before"]["median"].get<double>(), before_median, 2e-5) << where;
      EXPECT_NEAR(layer["error_after"]["mean"].get<double>(), after_mean, 2e-5) << where;
      EXPECT_NEAR(layer["error_after"]["median"].get<double>(), after_median, 2e-5) << where;
      // The draw matters (well beyond that tolerance), so a report measured at a training draw
      // would fail the lines above.
      EXPECT_GT(std::fabs(mean_of(trained_draw[l]) - after_mean), 1e-4) << where;
      EXPECT_EQ(layer["error_after"]["count"].get<std::int64_t>(), static_cast<std::int64_t>(held_out[l].size())) << where;
      // Not silent; and, over the layers, closer in what the fit minimises (the attention term
      // mostly, where the peaked source's outputs are nearly reached at the swap).
      objective_before += objective(layer["before"]);
      objective_after += objective(layer["after"]);
      EXPECT_GE(layer["after"]["norm_ratio"].get<double>(), kCollapsedNorm) << where;
      EXPECT_FALSE(layer["collapsed"].get<bool>()) << where;
    }
    EXPECT_LT(objective_after, 0.7 * objective_before) << c.name;
  }
}

// A layer that outputs (almost) nothing after its transfer is reported as collapsed, in
// transfer.json and on the console: here every kernel's eps guard is far above its features'
// sum, so each layer's output is a sliver of its target's whatever the fit does.
TEST(AttentionTransfer, ACollapsedLayerIsReported) {
  TempDir tmp;
  const fs::path source = peaked_source(tmp);
  json config = transfer_config(tmp, "silent", 0, source, {{"kind", "darkformer"}, {"num_features", 16}, {"eps", 1e6}},
                                {{"steps", 2}, {"lr", 1e-4}});
  dark::testing::write_text(tmp / "silent.json", config.dump(2));
  ASSERT_EQ(dark::testing::run_child({DARKFORMER_EXE, "train", "--config", tmp / "silent.json"}, tmp / "silent.log"), 0)
      << dark::testing::read_all(tmp / "silent.log");
  const json report = json::parse(read_file(tmp.path() / "silent/transfer.json"));
  EXPECT_EQ(report["collapsed_layers"], 2);
  for (const json& layer : report["layers"]) {
    EXPECT_TRUE(layer["collapsed"].get<bool>()) << layer.dump();
    EXPECT_LT(layer["after"]["norm_ratio"].get<double>(), kCollapsedNorm) << layer.dump();
  }
  const std::string log = dark::testing::read_all(tmp / "silent.log");
  EXPECT_NE(log.find("attention transfer: layer 0 collapsed"), std::string::npos) << log;
  EXPECT_NE(log.find("attention transfer: layer 1 collapsed"), std::string::npos) << log;
}

// A run that transfers and then finetunes, interrupted after its first checkpoint, resumes
// with the same losses as the uninterrupted run: the weights come from the checkpoint and the
// transfer is not run again. A transfer-only run folder is a finetuning source.
TEST(AttentionTransfer, ResumeSkipsTheTransferAndATransferOnlyRunIsASource) {
  TempDir tmp;
  const fs::path source = peaked_source(tmp);
  const json attention = {{"kind", "darkformer"}, {"num_features", 16}};
  const json transfer = {{"steps", 5}, {"lr", 0.01}};
  const json full = transfer_config(tmp, "full", 20, source, attention, transfer);
  train(parse_config(full), {});
  fs::copy(tmp.path() / "full", tmp.path() / "cut", fs::copy_options::recursive);
  fs::remove_all(tmp.path() / "cut/checkpoints" / formats::checkpoint_name(20));
  fs::remove(tmp.path() / "cut/transfer.json");
  json cut = full;
  cut["output"]["dir"] = (tmp.path() / "cut").string();
  TrainOptions resume;
  resume.resume = true;
  train(parse_config(cut), resume);
  EXPECT_EQ(losses(tmp.path() / "full"), losses(tmp.path() / "cut"));
  EXPECT_FALSE(fs::exists(tmp.path() / "cut/transfer.json")) << "the resumed run transferred again";
  // The finetuning after the transfer trains (the transfer hands the parameters back intact).
  auto weights_at = [&](int step) {
    return formats::load_checkpoint(tmp.path() / "full/checkpoints" / formats::checkpoint_name(step)).model;
  };
  const auto at10 = weights_at(10), at20 = weights_at(20);
  for (const char* name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.feature_map.M"})
    EXPECT_GT(max(abs(sub(at20.at(name), at10.at(name)))).item(), 0.0) << name << " did not train after the transfer";

  train(parse_config(transfer_config(tmp, "only", 0, source, attention, transfer)), {});
  const TrainResult r = train(parse_config(transfer_config(tmp, "after", 2, tmp.path() / "only", attention,
                                                           {{"steps", 0}})),
                              {});
  EXPECT_EQ(r.steps, 2);
  EXPECT_TRUE(std::isfinite(r.final_eval.loss));
}

// A transfer stopped by SIGTERM saves its state and exits 75; a rerun without --resume is
// refused, one with --resume continues it from where it stopped and ends with the weights and
// the report of the uninterrupted transfer, bit for bit.
TEST(AttentionTransfer, AStoppedTransferContinuesWhereItStopped) {
  TempDir tmp;
  const fs::path source = peaked_source(tmp);
  const json attention = {{"kind", "darkformer"}, {"num_features", 16}};
  const json transfer = {{"steps", 1000}, {"lr", 0.01}, {"checkpoint_interval", 0}};
  for (const char* name : {"stopped", "whole"}) {
    json c = transfer_config(tmp, name, 0, source, attention, transfer);
    c["training"]["log_interval"] = 1;
    dark::testing::write_text(tmp / (std::string(name) + ".json"), c.dump(2));
  }
  const auto args = [&](const std::string& name, bool resume) {
    std::vector<std::string> a = {DARKFORMER_EXE, "train", "--config", tmp / (name + ".json")};
    if (resume) a.push_back("--resume");
    return a;
  };
  const pid_t pid = dark::testing::start_child(args("stopped", false), tmp / "stopped.log");
  bool transferring = false;
  for (int i = 0; i < 6000 && !transferring; ++i) {
    transferring = dark::testing::read_all(tmp / "stopped.log").find("transfer step    10/") != std::string::npos;
    if (!transferring) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(transferring) << dark::testing::read_all(tmp / "stopped.log");
  ::kill(pid, SIGTERM);
  const std::optional<int> code = dark::testing::wait_child(pid, std::chrono::seconds(60));
  const std::string log = dark::testing::read_all(tmp / "stopped.log");
  ASSERT_EQ(code, kStoppedBySignal) << log;
  EXPECT_NE(log.find("attention transfer: stopped by a signal at step "), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(tmp.path() / "stopped/transfer")) << log;
  EXPECT_FALSE(fs::exists(tmp.path() / "stopped/transfer.json"));
  EXPECT_TRUE(formats::list_checkpoints(tmp.path() / "stopped").empty());

  EXPECT_NE(dark::testing::run_child(args("stopped", false), tmp / "again.log"), 0);
  EXPECT_NE(dark::testing::read_all(tmp / "again.log").find("holds an attention transfer that stopped before its end"),
            std::string::npos)
      << dark::testing::read_all(tmp / "again.log");
  ASSERT_EQ(dark::testing::run_child(args("stopped", true), tmp / "resumed.log"), 0) << dark::testing::read_all(tmp / "resumed.log");
  ASSERT_EQ(dark::testing::run_child(args("whole", false), tmp / "whole.log"), 0) << dark::testing::read_all(tmp / "whole.log");
  EXPECT_FALSE(fs::exists(tmp.path() / "stopped/transfer")) << "the finished transfer left its state";
  const json resumed = json::parse(read_file(tmp.path() / "stopped/transfer.json"));
  const json whole = json::parse(read_file(tmp.path() / "whole/transfer.json"));
  EXPECT_GT(resumed["resumed_at"].get<std::int64_t>(), 9);
  EXPECT_LT(resumed["resumed_at"].get<std::int64_t>(), 1000);
  EXPECT_EQ(whole["resumed_at"], 0);
  for (const char* key : {"layers", "validation_at_swap", "first_loss", "last_loss"}) EXPECT_EQ(resumed[key], whole[key]) << key;
  const fs::path weights = fs::path("checkpoints") / formats::checkpoint_name(0) / "model.safetensors";
  EXPECT_EQ(read_file(tmp.path() / "stopped" / weights), read_file(tmp.path() / "whole" / weights))
      << "the continued transfer's weights differ from the uninterrupted one's";
}

// Window dropout runs steps of a layer with an exact window without it (features only), less
// often as the transfer goes on; a layer without a window is untouched by it.
TEST(AttentionTransfer, WindowDropoutDropsTheWindowOnAFallingShareOfSteps) {
  TransferConfig tc;
  tc.steps = 10;
  tc.window_dropout = 0.8;
  EXPECT_DOUBLE_EQ(window_dropout_probability(tc, 0), 0.8);
  EXPECT_DOUBLE_EQ(window_dropout_probability(tc, 5), 0.4);
  EXPECT_NEAR(window_dropout_probability(tc, 9), 0.08, 1e-12);
  tc.window_dropout = 0;
  EXPECT_EQ(window_dropout_probability(tc, 0), 0.0);

  TempDir tmp;
  const fs::path source = peaked_source(tmp);
  const auto weights_of = [&](const std::string& run, const json& attention, double dropout) {
    train(parse_config(transfer_config(tmp, run, 0, source, attention,
                                       {{"steps", 4}, {"lr", 0.01}, {"trainable", {"qk"}}, {"window_dropout", dropout}})),
          {});
    return formats::load_checkpoint(tmp.path() / run / "checkpoints" / formats::checkpoint_name(0)).model;
  };
  const json window = {{"kind", "performer"}, {"num_features", 16}, {"exact_window", 4}};
  const auto kept = weights_of("kept", window, 0.0), dropped = weights_of("dropped", window, 0.99);
  EXPECT_GT(max(abs(sub(kept.at("model.layers.0.self_attn.q_proj.weight"), dropped.at("model.layers.0.self_attn.q_proj.weight"))))
                .item(),
            0.0)
      << "window dropout changed nothing";
  const json none = {{"kind", "performer"}, {"num_features", 16}};
  const auto a = weights_of("a", none, 0.0), b = weights_of("b", none, 0.99);
  for (const auto& [name, t] : a) EXPECT_EQ(max(abs(sub(t, b.at(name)))).item(), 0.0) << name;
}

TEST(AttentionTransfer, SettingsThatCannotWorkAreErrors) {
  TempDir tmp;
  const fs::path source = peaked_source(tmp);
  dark::testing::expect_error(
      [&] { parse_config(json{{"finetune", {{"transfer", {{"steps", 3}}}}}}); },
      {"finetune.transfer.steps", "finetune.init_from"});
  dark::testing::expect_error([&] { parse_config(json{{"training", {{"steps", 0}}}, {"schedule", {{"warmup_steps", 0}}}}); },
                              {"training.steps", "finetune.init_from"});
  dark::testing::expect_error(
      [&] {
        train(parse_config(transfer_config(tmp, "p", 0, source, {{"kind", "performer"}, {"num_features", 8}},
                                           {{"steps", 2}})),
              {});
      },
      {"finetune.transfer.trainable", "feature_map", "selects no parameter", "[\"qk\"]"});
  dark::testing::expect_error(
      [&] { train(parse_config(transfer_config(tmp, "s", 0, source, {{"kind", "softmax"}}, {{"steps", 2}})), {}); },
      {"finetune.transfer", "no layer is swapped"});
  dark::testing::expect_error(
      [&] {
        parse_config(transfer_config(tmp, "z", 0, source, {{"kind", "darkformer"}},
                                     {{"steps", 2}, {"output_weight", 0}, {"attention_weight", 0}}));
      },
      {"finetune.transfer.attention_weight", "output_weight", "both 0"});
}

}  // namespace
}  // namespace dark::train::transfer_test
