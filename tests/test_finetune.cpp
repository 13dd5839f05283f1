// Finetuning: init_from (our checkpoints) with an attention swap, the trainable presets and
// globs, and what freezing must guarantee: frozen parameters keep their values bit for bit,
// have no gradient and no optimizer state.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "tests/test_util.h"
#include "tests/tiny_gguf_model.h"
#include "tests/train_test_util.h"
#include "train/formats/checkpoint.h"
#include "train/config.h"
#include "train/swap/finetune.h"
#include "train/formats/gguf_import.h"
#include "train/model_builder.h"
#include "train/trainer.h"

namespace dark::train {
namespace {

using dark::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

std::map<std::string, Tensor> saved_parameters(const fs::path& run, std::int64_t step) {
  return formats::load_checkpoint(run / "checkpoints" / formats::checkpoint_name(step)).model;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const auto x = a.to(DType::f32).to_vector<float>(), y = b.to(DType::f32).to_vector<float>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

std::set<std::string> names_of(const std::vector<std::pair<std::string, Tensor*>>& params) {
  std::set<std::string> out;
  for (const auto& [name, p] : params) out.insert(name);
  return out;
}

RunConfig model_only_config(const json& attention, int n_layers) {
  return parse_config(json{{"model", {{"vocab_size", 50}, {"d_model", 16}, {"n_layers", n_layers}, {"n_heads", 2}, {"d_ff", 32}}},
                           {"attention", attention}});
}

TEST(Trainable, LimitedAttentionSelectsExactlyTheProjectionsAndFeatureMaps) {
  for (const char* kind : {"darkformer", "lfk", "softmax"}) {
    auto model = build_model(model_only_config({{"kind", kind}, {"num_features", 8}}, 3));
    const Freezing f = freeze_parameters(*model, {"limited_attention"});
    std::set<std::string> expected;
    for (int layer = 0; layer < 3; ++layer) {
      const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
      for (const char* proj : {"q_proj", "k_proj", "v_proj"}) expected.insert(p + proj + ".weight");
      if (std::string(kind) == "darkformer") expected.insert(p + "feature_map.M");
      if (std::string(kind) == "lfk") expected.insert(p + "feature_map.W");
    }
    EXPECT_EQ(names_of(f.trainable), expected) << kind;
    for (const auto& [name, p] : model->named_parameters())
      EXPECT_EQ(p->requires_grad(), expected.contains(name)) << kind << " " << name;
    EXPECT_EQ(f.frozen.size() + f.trainable.size(), model->named_parameters().size());
  }
}

TEST(Trainable, GlobsAllAndTyposAreChecked) {
  auto model = build_model(model_only_config({{"kind", "softmax"}}, 2));
  EXPECT_EQ(freeze_parameters(*model, {"all"}).frozen.size(), 0u);
  auto model2 = build_model(model_only_config({{"kind", "softmax"}}, 2));
  const Freezing f = freeze_parameters(*model2, {"*.mlp.*", "model.norm.weight"});
  EXPECT_EQ(f.trainable.size(), 2u * 3 + 1);
  auto model3 = build_model(model_only_config({{"kind", "softmax"}}, 2));
  dark::testing::expect_error([&] { freeze_parameters(*model3, {"*.self_attn.qproj.*"}); },
                              {"finetune.trainable: \"*.self_attn.qproj.*\" matches no parameter"});
  EXPECT_THROW(parse_config(json{{"finetune", {{"trainable", json::array()}}}}), Error);
}

TEST(Finetune, SwapLoadsTheSourceAndFreezesTheRest) {
  TempDir tmp;
  train(parse_config(quiet(tiny_config(tmp, "pretrain", 10))), {});
  const fs::path source_run = tmp.path() / "pretrain";
  const auto source = saved_parameters(source_run, 10);

  // DARKFormer with identity M, limited attention: at step 0 the model equals the source.
  const json attention = {{"kind", "darkformer"}, {"num_features", 16}};
  RunConfig config = parse_config(finetune_config(tmp, "swap", 6, source_run, attention, {"limited_attention"}));
  TrainOptions options;
  bool checked_start = false;
  options.before_step = [&](std::int64_t step, nn::CausalLM& model) {
    if (step != 0) return;
    checked_start = true;
    for (auto& [name, p] : model.named_parameters()) {
      if (name.find("feature_map") != std::string::npos) continue;
      EXPECT_TRUE(bitwise_equal(*p, source.at(name))) << name;
    }
  };
  const TrainResult r = train(config, options);
  EXPECT_TRUE(checked_start);
  EXPECT_TRUE(std::isfinite(r.final_eval.loss));

  // Afterwards: frozen tensors unchanged bit for bit, trained ones moved, and the optimizer
  // holds state for the trained ones only.
  const formats::CheckpointData ck = formats::load_checkpoint(tmp.path() / "swap/checkpoints" / formats::checkpoint_name(6));
  const std::vector<std::string> globs = trainable_globs({"limited_attention"});
  int frozen = 0, trained = 0;
  for (const auto& [name, t] : ck.model) {
    const bool trainable = nn::matches_any(name, globs);
    if (!source.contains(name)) {  // M: new, trained
      EXPECT_TRUE(trainable) << name;
      ++trained;
      continue;
    }
    if (trainable) {
      EXPECT_FALSE(bitwise_equal(t, source.at(name))) << name << " did not train";
      ++trained;
    } else {
      EXPECT_TRUE(bitwise_equal(t, source.at(name))) << name << " changed although frozen";
      ++frozen;
    }
    EXPECT_EQ(ck.optimizer.contains("exp_avg." + name), trainable) << name;
    EXPECT_EQ(ck.optimizer.contains("exp_avg_sq." + name), trainable) << name;
  }
  EXPECT_EQ(trained, 2 * 4);  // q, k, v, M in each of 2 layers
  EXPECT_EQ(frozen, static_cast<int>(ck.model.size()) - trained);
  const RunConfig saved = parse_config(ck.state.at("config"));
  EXPECT_EQ(saved.model.d_model, 32);  // from the source, not the schema default
  EXPECT_EQ(saved.finetune.trainable, std::vector<std::string>{"limited_attention"});
}

TEST(Finetune, ResumedFinetuningContinuesBitForBit) {
  TempDir tmp;
  train(parse_config(quiet(tiny_config(tmp, "pretrain", 10))), {});
  const json attention = {{"kind", "performer"}, {"num_features", 16}};
  const json full = finetune_config(tmp, "full", 20, tmp.path() / "pretrain", attention, {"limited_attention"});
  train(parse_config(full), {});
  // Interrupted after step 10: a copy of the run without its last checkpoint.
  fs::copy(tmp.path() / "full", tmp.path() / "cut", fs::copy_options::recursive);
  fs::remove_all(tmp.path() / "cut/checkpoints" / formats::checkpoint_name(20));
  json cut = full;
  cut["output"]["dir"] = (tmp.path() / "cut").string();
  TrainOptions resume;
  resume.resume = true;
  train(parse_config(cut), resume);
  EXPECT_EQ(losses(tmp.path() / "full"), losses(tmp.path() / "cut"));
}

TEST(Finetune, ConflictsAndBadSourcesAreErrors) {
  TempDir tmp;
  train(parse_config(quiet(tiny_config(tmp, "pretrain", 10))), {});
  json config = finetune_config(tmp, "conflict", 6, tmp.path() / "pretrain", {{"kind", "softmax"}}, {"all"});
  config["model"] = {{"d_model", 48}};
  dark::testing::expect_error([&] { train(parse_config(config), {}); }, {"model.d_model: 48 differs from checkpoint"});
  EXPECT_FALSE(fs::exists(tmp.path() / "conflict/checkpoints"));

  config["model"] = {{"d_model", 32}, {"dropout", 0.1}};  // agreeing keys and non-architecture keys are fine
  EXPECT_NO_THROW(train(parse_config(config), {}));

  json missing = finetune_config(tmp, "missing", 6, tmp.path() / "nowhere", {{"kind", "softmax"}}, {"all"});
  dark::testing::expect_error([&] { train(parse_config(missing), {}); }, {"does not exist"});
}

// The model's context comes from the source: model.max_seq_len, unless the config sets it,
// becomes max(the source's, data.seq_len): a GGUF's llama.context_length, a Hugging Face
// folder's max_position_embeddings, our checkpoint's max_seq_len.
TEST(Finetune, TheSourcesContextBecomesTheRunsMaxSeqLen) {
  TempDir tmp;
  dark::testing::write_hf_tiny_as_gguf(tmp / "long.gguf", /*context_length=*/2000);
  dark::testing::write_hf_tiny_as_gguf(tmp / "short.gguf", /*context_length=*/20);
  const auto adopted = [&](const fs::path& source, const json& extra) {
    json doc = {{"finetune", {{"init_from", source.string()}}}, {"data", {{"seq_len", 32}}}};
    doc.merge_patch(extra);
    RunConfig c = parse_config(doc);
    EXPECT_EQ(c.model.max_seq_len, doc.contains("model") ? doc["model"]["max_seq_len"].get<int>() : 32);  // before
    const InitSource s = load_init_source(source.string());
    adopt_architecture(c, s.model, s.description);
    return c.model.max_seq_len;
  };
  EXPECT_EQ(load_init_source(tmp / "long.gguf").model.max_seq_len, 2000);
  EXPECT_EQ(adopted(tmp / "long.gguf", json::object()), 2000);
  EXPECT_EQ(adopted(tmp / "short.gguf", json::object()), 32);  // trained longer than its source: data.seq_len
  EXPECT_EQ(adopted(tmp / "long.gguf", {{"model", {{"max_seq_len", 100}}}}), 100);  // the config's own
  EXPECT_EQ(adopted(dark::testing::kHfTinyFolder, json::object()), 64);  // max_position_embeddings

  // Through a run of no steps (its config's warm-up of 5 left in), and from that run's checkpoint.
  json run = finetune_config(tmp, "imported", 0, tmp / "long.gguf", {{"kind", "softmax"}}, {"all"});
  run["data"].erase("tokenizer");
  run["data"]["dir"] = tmp / "data-gguf";
  ASSERT_EQ(run["schedule"]["warmup_steps"], 5);
  EXPECT_EQ(train(parse_config(run), {}).steps, 0);
  const RunConfig saved = parse_config(formats::load_checkpoint(formats::find_checkpoint(tmp / "imported")).state.at("config"));
  EXPECT_EQ(saved.model.max_seq_len, 2000);
  EXPECT_EQ(adopted(tmp / "imported", json::object()), 2000);
}

// training.steps 0 (a transfer- or import-only run) accepts any warm-up; a run with steps
// still refuses a warm-up longer than them.
TEST(Finetune, ARunOfNoStepsKeepsItsConfigsWarmUp) {
  json doc = {{"finetune", {{"init_from", "x.gguf"}}}, {"training", {{"steps", 0}}}, {"schedule", {{"warmup_steps", 20}}}};
  EXPECT_EQ(parse_config(doc).schedule.warmup_steps, 20);
  doc["training"]["steps"] = 10;
  dark::testing::expect_error([&] { parse_config(doc); }, {"schedule.warmup_steps: 20 exceeds training.steps (10)"});
}

// GGUF's converter reorders each head's q/k rows for llama.cpp's adjacent-pair rotation; the
// import must undo exactly that: reproduce the converter's permutation here and invert it.
TEST(GgufImport, RotaryRowPermutationIsUndone) {
  const std::int64_t heads = 3, head_dim = 8, cols = 5, rows = heads * head_dim;
  const Tensor hf = Tensor::randn({rows, cols}, 7);
  const auto h = hf.to_vector<float>();
  std::vector<float> gguf(h.size());
  // convert_hf_to_gguf: reshape(heads, 2, head_dim/2, cols).swapaxes(1, 2)
  for (std::int64_t hh = 0; hh < heads; ++hh)
    for (std::int64_t j = 0; j < 2; ++j)
      for (std::int64_t i = 0; i < head_dim / 2; ++i)
        for (std::int64_t c = 0; c < cols; ++c)
          gguf[((hh * (head_dim / 2) + i) * 2 + j) * cols + c] = h[((hh * 2 + j) * (head_dim / 2) + i) * cols + c];
  const Tensor back = formats::unpermute_rotary_rows(Tensor::from_vector(gguf, {rows, cols}), heads);
  EXPECT_TRUE(bitwise_equal(back, hf));
}

}  // namespace
}  // namespace dark::train
