// Attention transfer (finetune.transfer, train/transfer.h): the fitted layers move toward the
// source's exact attention, measured here against an independent reference (a naive softmax
// over the source model's own queries, keys and values, not the transfer's recorded targets,
// so a transfer that fitted the wrong target fails); a transfer-only run (training.steps 0)
// writes a run folder that finetuning starts from; a resumed run does not redo the transfer;
// bad settings are errors that say what to do.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
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
#include "train/finetune.h"
#include "train/formats/checkpoint.h"
#include "train/model_builder.h"
#include "train/stop_signal.h"
#include "train/trainer.h"
#include "train/training_run.h"
#include "train/transfer.h"

namespace dark::train::transfer_test {  // its own namespace: unity batches join test files
namespace {

using dark::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

// Records the queries, keys and values a kernel is given.
class Recorder final : public nn::AttentionKernel {
 public:
  explicit Recorder(std::unique_ptr<nn::AttentionKernel> inner_) : inner(std::move(inner_)) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask) override {
    seen = {q.detach(), k.detach(), v.detach()};
    return inner->forward(q, k, v, key_mask);
  }
  Tensor decode(const Tensor& q, const Tensor& k, const Tensor& v, std::unique_ptr<nn::DecodeState>& state) override {
    return inner->decode(q, k, v, state);
  }
  const char* kind() const override { return inner->kind(); }
  std::unique_ptr<nn::AttentionKernel> inner;
  std::vector<Tensor> seen;
};

// Causal softmax attention written out: (B, T, H, D) with H = Hkv here.
Tensor naive_softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  const std::int64_t T = q.size(1), D = q.size(3);
  const Tensor qh = permute(q, {0, 2, 1, 3}), kh = permute(k, {0, 2, 1, 3}), vh = permute(v, {0, 2, 1, 3});
  Tensor s = mul_scalar(matmul(qh, kh, false, true), 1.0 / std::sqrt(static_cast<double>(D)));
  std::vector<double> mask(static_cast<std::size_t>(T * T));
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < T; ++j) mask[i * T + j] = j > i ? -1e30 : 0.0;
  s = add(s, Tensor::from_vector(mask, {T, T}).to(s.dtype()));
  return permute(matmul(softmax(s, -1), vh), {0, 2, 1, 3});
}

// Per layer: the mean over (batch, position, head) of |kernel(q, k, v) - softmax(q, k, v)| /
// |softmax(q, k, v)|, with q, k, v the source model's own on `ids`.
std::vector<double> layer_errors(nn::CausalLM& source, nn::CausalLM& swapped, const Tensor& ids) {
  NoGradGuard no_grad;
  std::vector<Recorder*> recorders;
  for (auto& layer : source.model.layers) {
    auto r = std::make_unique<Recorder>(std::move(layer->self_attn.kernel));
    recorders.push_back(r.get());
    layer->self_attn.kernel = std::move(r);
  }
  source.forward(ids);
  std::vector<double> out;
  const auto kernels = swapped.attention_kernels();
  for (std::size_t i = 0; i < recorders.size(); ++i) {
    const std::vector<Tensor>& in = recorders[i]->seen;
    const Tensor want = naive_softmax_attention(in[0], in[1], in[2]);
    const Tensor got = kernels[i]->forward(in[0], in[1], in[2]);
    const Tensor rel = div(sqrt(sum(square(sub(got, want)), {3})), sqrt(sum(square(want), {3})));
    out.push_back(mean(rel).item());

  }
  for (std::size_t i = 0; i < recorders.size(); ++i)
    source.model.layers[i]->self_attn.kernel = std::move(recorders[i]->inner);
  return out;
}

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

// A briefly trained tiny model with its query and key projections scaled by 4: logits 16x
// larger, attention as peaked as a pretrained model's (where random features are poor).
fs::path peaked_source(const TempDir& tmp) {
  train(parse_config(quiet(tiny_config(tmp, "pretrain", 10))), {});
  formats::CheckpointData ck = formats::load_checkpoint(tmp.path() / "pretrain/checkpoints" / formats::checkpoint_name(10));
  for (auto& [name, t] : ck.model)
    if (name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight")) t = mul_scalar(t, 4.0);
  formats::save_checkpoint(tmp.path() / "peaked", ck, 0);
  return tmp.path() / "peaked";
}

TEST(AttentionTransfer, EveryLayerMovesTowardTheSourcesExactAttention) {
  TempDir tmp;
  const fs::path source_run = peaked_source(tmp);
  const auto source_weights = formats::load_checkpoint(formats::find_checkpoint(source_run)).model;
  for (const json& kind : {json{{"kind", "darkformer"}, {"num_features", 16}},
                           json{{"kind", "performer"}, {"num_features", 16}, {"exact_window", 4}}}) {
    const json transfer = {{"steps", 40}, {"lr", 0.01}, {"trainable", kind["kind"] == "performer" ? json{"qk"} : json{"feature_map"}}};
    const std::string name = kind["kind"].get<std::string>();
    const RunConfig config = parse_config(transfer_config(tmp, "transfer-" + name, 0, source_run, kind, transfer));
    train(config, {});
    const fs::path run = tmp.path() / ("transfer-" + name);
    ASSERT_TRUE(fs::exists(run / "checkpoints" / formats::checkpoint_name(0))) << name;
    const json report = json::parse(read_file(run / "transfer.json"));
    EXPECT_EQ(report["steps"], 40);
    EXPECT_GT(report["peak_resident_mib"].get<double>(), 1.0) << name;
    ASSERT_EQ(report["layers"].size(), 2u);

    // Independently: the source's own q, k, v on validation text, its exact softmax, and the
    // swapped kernels before and after.
    RunConfig softmax = config;
    softmax.attention = attention::AttentionConfig{};
    softmax.model = parse_config(json::parse(read_file(run / "config.json"))).model;
    RunConfig swapped = softmax;
    swapped.attention = config.attention;
    auto source = model_from(softmax, source_weights);
    auto at_swap = model_from(swapped, source_weights);
    auto after = model_from(swapped, formats::load_checkpoint(run / "checkpoints" / formats::checkpoint_name(0)).model);
    const data::PreparedData data = data::open_prepared(config.data.dir);
    const data::ValidationSet val(data.open_shard(data::Split::val), 8, config.data.seq_len, 16);
    const Tensor tokens = val.batch(1);  // the transfer measured on batches 0 and 1
    const Tensor batch = core::slice(tokens, 1, 0, tokens.size(1) - 1).contiguous();
    // The independent check holds q, k, v at the source's: it applies where only the feature
    // map trains (darkformer); performer's trained projections are checked through its report.
    // The language-model cost of the swap, before the transfer: the swapped source evaluated here.
    const EvalMetrics swap_eval = evaluate(*at_swap, val, config.training.eval_batches);
    EXPECT_NEAR(report["validation_at_swap"]["loss"].get<double>(), swap_eval.loss, 1e-4 * swap_eval.loss) << name;
    EXPECT_EQ(report["validation_at_swap"]["tokens"].get<std::int64_t>(), swap_eval.tokens) << name;
    const std::vector<double> before_err = layer_errors(*source, *at_swap, batch);
    const std::vector<double> after_err = layer_errors(*source, *after, batch);
    for (std::size_t l = 0; l < 2; ++l) {
      const double reported_before = report["layers"][l]["error_before"]["mean"];
      const double reported_after = report["layers"][l]["error_after"]["mean"];
      EXPECT_LT(reported_after, 0.8 * reported_before) << name << " layer " << l;
      if (name == "darkformer") EXPECT_LT(after_err[l], 0.8 * before_err[l]) << name << " layer " << l;
    }
  }
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
}

}  // namespace
}  // namespace dark::train::transfer_test
