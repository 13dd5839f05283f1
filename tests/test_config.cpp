// The run configuration: defaults and auto values, every error message kind (exact text),
// overrides, JSON round trips, unknown-key suggestions, file errors, and the tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>

#include "train/config.h"
#include "core/file_io.h"
#include "test_util.h"

namespace dark::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using dark::testing::error_of;
using dark::testing::TempDir;
using dark::testing::write_text;

// The error parse_config throws for a document given as JSON text.
std::string parse_error(const std::string& doc) {
  return error_of([&] { parse_config(json::parse(doc)); });
}

TEST(Config, DefaultsResolve) {
  const RunConfig c = parse_config(json::object(), "quickstart");
  EXPECT_EQ(c.model.vocab_size, 0);  // from the tokenizer, later
  EXPECT_EQ(c.model.d_model, 256);
  EXPECT_EQ(c.model.n_layers, 4);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.model.n_kv_heads, 4);     // auto: n_heads
  EXPECT_EQ(c.model.d_ff, 704);         // auto: 8/3 * 256 = 682.7 -> 704
  EXPECT_EQ(c.model.max_seq_len, 256);  // auto: data.seq_len
  EXPECT_EQ(c.model.mlp, nn::MlpKind::swiglu);
  EXPECT_EQ(c.model.rope_theta, 10000.0);
  EXPECT_EQ(c.model.norm_eps, 1e-5);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.dropout, 0.0);
  EXPECT_EQ(c.model.init_std, 0.02);
  EXPECT_EQ(c.attention.kind, attention::Kind::softmax);
  EXPECT_EQ(c.attention.num_features, 64);
  EXPECT_EQ(c.attention.draw, attention::FeatureDraw::orthogonal);
  EXPECT_EQ(c.attention.redraw_interval, 1000);
  EXPECT_EQ(c.attention.eps, 1e-6);
  EXPECT_EQ(c.attention.mode, attention::Mode::linear);
  EXPECT_EQ(c.attention.proposal, attention::Proposal::isotropic);
  EXPECT_EQ(c.attention.chunk_size, 64);
  EXPECT_EQ(c.attention.calibration_batches, 4);
  EXPECT_EQ(c.attention.darkformer.scope, attention::MatrixScope::head);
  EXPECT_EQ(c.attention.darkformer.rank, 0);
  EXPECT_EQ(c.attention.darkformer.init, attention::MatrixInit::identity);
  EXPECT_EQ(c.attention.lfk.init, attention::FeatureDraw::orthogonal);
  EXPECT_TRUE(c.attention.layers.empty());
  EXPECT_EQ(c.data.corpus, "debdocs");
  EXPECT_TRUE(c.data.sources.empty());
  EXPECT_EQ(c.data.dir, "cache/data/debdocs-sentencepiece-8192");
  EXPECT_EQ(c.data.tokenizer, data::TokenizerKind::sentencepiece);
  EXPECT_EQ(c.data.tokenizer_model, "");
  EXPECT_EQ(c.data.vocab_size, 8192);
  EXPECT_EQ(c.data.val_fraction, 0.02);
  EXPECT_EQ(c.data.seq_len, 256);
  EXPECT_EQ(c.data.val_windows, 64);
  EXPECT_EQ(c.optimizer.name, nn::OptimizerKind::adamw);
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.betas, (std::array<double, 2>{0.9, 0.95}));
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.optimizer.momentum, 0.0);
  EXPECT_EQ(c.optimizer.no_decay, (std::vector<std::string>{"*norm*", "*embed_tokens*", "*feature_map*"}));
  EXPECT_EQ(c.optimizer.grad_clip, 1.0);
  EXPECT_EQ(c.schedule.kind, nn::ScheduleKind::cosine);
  EXPECT_EQ(c.schedule.warmup_steps, 100);
  EXPECT_EQ(c.schedule.min_lr_ratio, 0.1);
  EXPECT_EQ(c.training.steps, 1000);
  EXPECT_EQ(c.training.batch_size, 16);
  EXPECT_EQ(c.training.grad_accum, 1);
  EXPECT_EQ(c.training.eval_interval, 100);
  EXPECT_EQ(c.training.eval_batches, 8);
  EXPECT_EQ(c.training.checkpoint_interval, 500);
  EXPECT_EQ(c.training.keep_checkpoints, 3);
  EXPECT_EQ(c.training.max_consecutive_skips, 5);
  EXPECT_EQ(c.training.log_interval, 10);
  EXPECT_EQ(c.training.generate_tokens, 64);
  EXPECT_EQ(c.training.generate_prompt, "The");
  EXPECT_EQ(c.output.dir, "runs/quickstart");
  EXPECT_EQ(c.seed, 0u);
}

TEST(Config, AutoValues) {
  EXPECT_EQ(nn::auto_d_ff(256), 704);   // 682.7
  EXPECT_EQ(nn::auto_d_ff(512), 1344);  // 1365.3
  EXPECT_EQ(nn::auto_d_ff(768), 2048);  // exactly 2048
  EXPECT_EQ(nn::auto_d_ff(576), 1536);  // exactly 1536 (SmolLM2-135M's width)
  EXPECT_EQ(nn::auto_d_ff(36), 128);    // 96 is halfway between 64 and 128: rounds up
  EXPECT_EQ(nn::auto_d_ff(8), 64);      // never below 64
  const RunConfig c = parse_config(json::parse(R"({"model": {"d_model": 512, "n_heads": 8, "n_kv_heads": 2,
      "d_ff": 1000, "max_seq_len": 1024}, "data": {"corpus": "wiki", "tokenizer": "byte", "vocab_size": 256,
      "dir": ""}, "output": {"dir": "elsewhere"}})"),
                                   "x");
  EXPECT_EQ(c.model.n_kv_heads, 2);  // explicit values stay
  EXPECT_EQ(c.model.d_ff, 1000);
  EXPECT_EQ(c.model.max_seq_len, 1024);
  EXPECT_EQ(c.data.dir, "cache/data/wiki-byte-256");
  EXPECT_EQ(c.output.dir, "elsewhere");
}

TEST(Config, ValueErrorsNameThePathAndTheAllowedValues) {
  EXPECT_EQ(parse_error(R"({"optimizer": {"name": "adam"}})"),
            R"(config: optimizer.name: "adam" is not one of adamw, sgd)");
  EXPECT_EQ(parse_error(R"({"training": {"steps": -5}})"),
            "config: training.steps: expected a non-negative integer, got -5");
  EXPECT_EQ(parse_error(R"({"training": {"steps": 0}})"),
            "config: training.steps: is 0: a run of no steps evaluates and saves its finetune.init_from source "
            "(after finetune.transfer, if set); set one");
  EXPECT_EQ(parse_error(R"({"training": {"keep_checkpoints": -1}})"),
            "config: training.keep_checkpoints: expected a non-negative integer, got -1");
  EXPECT_EQ(parse_error(R"({"optimizer": {"lr": "abc"}})"),
            R"(config: optimizer.lr: expected a number, got "abc")");
  EXPECT_EQ(parse_error(R"({"optimizer": {"lr": 0}})"), "config: optimizer.lr: expected a number > 0, got 0");
  EXPECT_EQ(parse_error(R"({"model": {"dropout": 1.0}})"),
            "config: model.dropout: expected a number in [0, 1), got 1.0");
  EXPECT_EQ(parse_error(R"({"data": {"val_fraction": 0}})"),
            "config: data.val_fraction: expected a number in (0, 1), got 0");
  EXPECT_EQ(parse_error(R"({"schedule": {"min_lr_ratio": 1.5}})"),
            "config: schedule.min_lr_ratio: expected a number in [0, 1], got 1.5");
  EXPECT_EQ(parse_error(R"({"training": {"batch_size": 2.5}})"),
            "config: training.batch_size: expected an integer, got 2.5");
  EXPECT_EQ(parse_error(R"({"training": {"batch_size": "8"}})"),
            R"(config: training.batch_size: expected an integer, got "8")");
  EXPECT_EQ(parse_error(R"({"model": {"d_model": 10000000000}})"),
            "config: model.d_model: expected a positive integer <= 2147483647, got 10000000000");
  EXPECT_EQ(parse_error(R"({"model": {"tie_embeddings": "yes"}})"),
            R"(config: model.tie_embeddings: expected true or false, got "yes")");
  EXPECT_EQ(parse_error(R"({"data": {"corpus": ""}})"),
            R"(config: data.corpus: expected a non-empty string, got "")");
  EXPECT_EQ(parse_error(R"({"data": {"corpus": 5}})"), "config: data.corpus: expected a string, got 5");
  EXPECT_EQ(parse_error(R"({"data": {"sources": "docs/*.md"}})"),
            R"(config: data.sources: expected a list of strings, got "docs/*.md")");
  EXPECT_EQ(parse_error(R"({"data": {"sources": ["a", 3]}})"),
            "config: data.sources[1]: expected a string, got 3");
  EXPECT_EQ(parse_error(R"({"optimizer": {"betas": [0.9]}})"),
            "config: optimizer.betas: expected a list of 2 numbers, got [0.9]");
  EXPECT_EQ(parse_error(R"({"optimizer": {"betas": [0.9, 1.5]}})"),
            "config: optimizer.betas[1]: expected a number in [0, 1), got 1.5");
  EXPECT_EQ(parse_error(R"({"attention": {"kind": "flash"}})"),
            R"(config: attention.kind: "flash" is not one of softmax, performer, lfk, darkformer)");
  EXPECT_EQ(parse_error(R"({"attention": {"kind": 3}})"),
            "config: attention.kind: expected one of softmax, performer, lfk, darkformer, got 3");
  EXPECT_EQ(parse_error(R"({"model": 5})"), "config: model: expected an object, got 5");
  EXPECT_EQ(parse_error(R"([1, 2])"), "config: expected a JSON object at the top level, got [1,2]");
  EXPECT_EQ(parse_error(R"({"seed": -1})"), "config: seed: expected a non-negative integer, got -1");
}

TEST(Config, IntegersWrittenAsFloatsAndNonSoftmaxKindsParse) {
  const RunConfig c =
      parse_config(json::parse(R"({"training": {"steps": 2e3}, "attention": {"kind": "darkformer"},
      "model": {"mlp": "geglu"}, "optimizer": {"name": "sgd", "momentum": 0.9}, "seed": 12345678901})"));
  EXPECT_EQ(c.training.steps, 2000);
  EXPECT_EQ(c.attention.kind, attention::Kind::darkformer);
  EXPECT_EQ(c.model.mlp, nn::MlpKind::geglu);
  EXPECT_EQ(c.optimizer.name, nn::OptimizerKind::sgd);
  EXPECT_EQ(c.optimizer.momentum, 0.9);
  EXPECT_EQ(c.seed, 12345678901u);
  EXPECT_EQ(parse_error(R"({"seed": 18446744073709551615})"),
            "config: seed: expected a non-negative integer <= 9223372036854775807, got 18446744073709551615");
  EXPECT_EQ(enum_name(attention::Kind::lfk), "lfk");
  EXPECT_EQ(enum_name(nn::ScheduleKind::constant), "constant");
}

TEST(Config, CrossFieldChecks) {
  EXPECT_EQ(parse_error(R"({"model": {"n_heads": 6}})"),
            "config: model.n_heads: 6 does not divide model.d_model (256); set model.head_dim to use heads of "
            "another width");
  EXPECT_EQ(parse_error(R"({"model": {"d_model": 12, "n_heads": 4}})"),
            "config: model.n_heads: head dimension model.d_model / model.n_heads = 12 / 4 = 3 is odd; "
            "RoPE rotates pairs of dimensions");
  EXPECT_EQ(parse_error(R"({"model": {"n_kv_heads": 3}})"),
            "config: model.n_kv_heads: 3 does not divide model.n_heads (4)");
  EXPECT_EQ(parse_error(R"({"model": {"n_kv_heads": 8}})"),
            "config: model.n_kv_heads: 8 does not divide model.n_heads (4)");
  EXPECT_EQ(parse_error(R"({"model": {"max_seq_len": 128}})"),
            "config: model.max_seq_len: 128 is less than data.seq_len (256)");
  EXPECT_EQ(parse_error(R"({"schedule": {"warmup_steps": 2000}})"),
            "config: schedule.warmup_steps: 2000 exceeds training.steps (1000)");
  EXPECT_EQ(
      parse_error(R"({"optimizer": {"momentum": 0.9}})"),
      R"(config: optimizer.momentum: 0.9 is only used by optimizer.name "sgd" (this is "adamw"); remove it or set 0)");
  // Warm-up equal to the run length is allowed.
  EXPECT_NO_THROW(
      parse_config(json::parse(R"({"schedule": {"warmup_steps": 10}, "training": {"steps": 10}})")));
}

TEST(Config, ValidateChecksProgrammaticChanges) {
  RunConfig c = parse_config(json::object());
  c.model.vocab_size = 8192;  // set from the tokenizer
  EXPECT_NO_THROW(validate_config(c));
  c.training.steps = 0;
  EXPECT_EQ(error_of([&] { validate_config(c); }),
            "config: training.steps: is 0: a run of no steps evaluates and saves its finetune.init_from source "
            "(after finetune.transfer, if set); set one");
  c.training.steps = 10;
  c.optimizer.betas = {0.9, 1.0};
  EXPECT_EQ(error_of([&] { validate_config(c); }),
            "config: optimizer.betas[1]: expected a number in [0, 1), got 1.0");
}

TEST(Config, UnknownKeysSuggestTheClosest) {
  EXPECT_EQ(parse_error(R"({"model": {"n_layer": 3}})"),
            "config: model.n_layer: unknown key (did you mean model.n_layers?)");
  EXPECT_EQ(parse_error(R"({"modle": {}})"), "config: modle: unknown key (did you mean model?)");
  EXPECT_EQ(parse_error(R"({"optimizer": {"warmup_steps": 5}})"),
            "config: optimizer.warmup_steps: unknown key (did you mean schedule.warmup_steps?)");
  EXPECT_EQ(parse_error(R"({"training": {"lr": 0.1}})"),
            "config: training.lr: unknown key (did you mean optimizer.lr?)");
  EXPECT_EQ(parse_error(R"({"attention": {"features": 3}})"),
            "config: attention.features: unknown key (attention has: kind, num_features, draw, "
            "redraw_interval, eps, mode, proposal, chunk_size, calibration_batches, windowed_layers, exact_window, "
            "far_field, window_balance, darkformer, lfk, "
            "layers)");
  EXPECT_EQ(
      parse_error(R"({"xyzzy": 1})"),
      "config: xyzzy: unknown key (top-level keys: model, attention, data, optimizer, schedule, training, "
      "evaluation, distributed, finetune, output, stability, seed)");
}

// Found by tests/fuzz/fuzz_config: an override's bare text that is not UTF-8 reached an
// error message's json::dump(), which threw nlohmann's type_error instead of dark::Error.
TEST(Config, OverrideTextMustBeUtf8) {
  json doc = json::object();
  EXPECT_EQ(error_of([&] { apply_override(doc, "training.steps=200\xff"); }),
            "config: training.steps: override value \"200\xEF\xBF\xBD\" is not valid UTF-8");
  EXPECT_EQ(error_of([&] { apply_override(doc, "output.dir=runs/\xc3"); }),
            "config: output.dir: override value \"runs/\xEF\xBF\xBD\" is not valid UTF-8");
  EXPECT_EQ(doc, json::object());
  // A document built in code can still hold such bytes: the message shows U+FFFD for them.
  const json direct = {{"optimizer", {{"name", std::string("ad\xffm")}}}};
  EXPECT_EQ(error_of([&] { parse_config(direct); }),
            "config: optimizer.name: \"ad\xEF\xBF\xBDm\" is not one of adamw, sgd");
}

TEST(Config, Overrides) {
  json doc = json::parse(R"({"training": {"steps": 50}})");
  apply_override(doc, "training.steps=200");                   // number
  apply_override(doc, "optimizer.betas=[0.8, 0.99]");          // array
  apply_override(doc, "model.tie_embeddings=false");           // boolean
  apply_override(doc, "data.corpus=mycorpus");                 // bare string
  apply_override(doc, "training.generate_prompt=123");         // string-typed key keeps the text
  apply_override(doc, R"(data.tokenizer_model="tok.model")");  // quoted string
  apply_override(doc, "attention.kind=performer");
  apply_override(doc, "seed=7");
  apply_override(doc, "output.dir=runs/a=b");  // only the first '=' splits
  const RunConfig c = parse_config(doc);
  EXPECT_EQ(c.training.steps, 200);
  EXPECT_EQ(c.optimizer.betas, (std::array<double, 2>{0.8, 0.99}));
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.data.corpus, "mycorpus");
  EXPECT_EQ(c.training.generate_prompt, "123");
  EXPECT_EQ(c.data.tokenizer_model, "tok.model");
  EXPECT_EQ(c.attention.kind, attention::Kind::performer);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.output.dir, "runs/a=b");

  // Type errors surface at validation, naming the key.
  json bad = json::object();
  apply_override(bad, "training.steps=abc");
  EXPECT_EQ(error_of([&] { parse_config(bad); }),
            R"(config: training.steps: expected an integer, got "abc")");
  bad = json::object();
  apply_override(bad, "optimizer.lr=fast");
  EXPECT_EQ(error_of([&] { parse_config(bad); }), R"(config: optimizer.lr: expected a number, got "fast")");
  bad = json::object();
  apply_override(bad, "model.tie_embeddings=1");
  EXPECT_EQ(error_of([&] { parse_config(bad); }),
            "config: model.tie_embeddings: expected true or false, got 1");

  // Unknown keys and malformed overrides fail at once.
  json any = json::object();
  EXPECT_EQ(error_of([&] { apply_override(any, "model.n_layer=3"); }),
            "config: model.n_layer: unknown key (did you mean model.n_layers?)");
  EXPECT_EQ(error_of([&] { apply_override(any, "model=3"); }),
            "config: model: unknown key (did you mean model?)");
  EXPECT_EQ(error_of([&] { apply_override(any, "training.steps"); }),
            R"(config: override "training.steps": expected key=value, e.g. training.steps=200)");
  EXPECT_EQ(error_of([&] { apply_override(any, "=5"); }),
            R"(config: override "=5": expected key=value, e.g. training.steps=200)");
  json wrong = json::parse(R"({"model": 5})");
  EXPECT_EQ(error_of([&] { apply_override(wrong, "model.d_model=64"); }),
            "config: model: expected an object, got 5");
}

TEST(Config, JsonRoundTrip) {
  json doc = json::parse(
      R"({"model": {"d_model": 128, "n_heads": 8, "n_kv_heads": 2, "mlp": "geglu", "dropout": 0.1},
      "attention": {"kind": "lfk", "num_features": 32}, "data": {"sources": ["a/*.txt", "b/**.md"], "tokenizer": "byte"},
      "optimizer": {"name": "sgd", "momentum": 0.5, "no_decay": []},
      "training": {"steps": 77}, "schedule": {"kind": "linear", "warmup_steps": 7}})");
  const RunConfig c = parse_config(doc, "rt");
  const json resolved = to_json(c);
  // Every documented key is present, and nothing else. Leaves are values other than non-empty
  // objects: attention.layers is empty here.
  const std::function<std::size_t(const json&)> leaves = [&](const json& v) -> std::size_t {
    if (!v.is_object() || v.empty()) return 1;
    std::size_t n = 0;
    for (const json& child : v) n += leaves(child);
    return n;
  };
  EXPECT_EQ(leaves(resolved), config_keys().size());
  for (const ConfigKey& k : config_keys()) {
    std::string pointer = "/" + k.path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    EXPECT_TRUE(resolved.contains(json::json_pointer(pointer))) << k.path;
  }
  EXPECT_EQ(resolved["model"]["d_ff"], 320);  // auto: 8/3 * 128 = 341.3 -> 320
  EXPECT_EQ(resolved["output"]["dir"], "runs/rt");
  EXPECT_EQ(resolved["attention"]["kind"], "lfk");
  EXPECT_EQ(resolved["data"]["sources"], json::parse(R"(["a/*.txt", "b/**.md"])"));
  // json -> struct -> json is the identity on a resolved config, whatever the stem.
  EXPECT_EQ(to_json(parse_config(resolved, "other")), resolved);
}

TEST(Config, NestedSections) {
  const RunConfig c = parse_config(json::parse(R"({"attention": {"kind": "darkformer", "draw": "iid",
      "redraw_interval": 0, "eps": 1e-4, "mode": "exact", "chunk_size": 32, "calibration_batches": 2,
      "darkformer": {"scope": "layer", "rank": 16, "init": "whiten"}, "lfk": {"init": "iid"}}})"));
  EXPECT_EQ(c.attention.draw, attention::FeatureDraw::iid);
  EXPECT_EQ(c.attention.redraw_interval, 0);
  EXPECT_EQ(c.attention.eps, 1e-4);
  EXPECT_EQ(c.attention.mode, attention::Mode::exact);
  EXPECT_EQ(c.attention.chunk_size, 32);
  EXPECT_EQ(c.attention.calibration_batches, 2);
  EXPECT_EQ(c.attention.darkformer.scope, attention::MatrixScope::layer);
  EXPECT_EQ(c.attention.darkformer.rank, 16);
  EXPECT_EQ(c.attention.darkformer.init, attention::MatrixInit::whiten);
  EXPECT_EQ(c.attention.lfk.init, attention::FeatureDraw::iid);
  EXPECT_EQ(enum_name(attention::Proposal::variance_optimal), "variance_optimal");

  // --set reaches the third level and keeps the keys beside it.
  json doc = json::parse(R"({"attention": {"darkformer": {"scope": "layer"}}})");
  apply_override(doc, "attention.darkformer.rank=8");
  apply_override(doc, "attention.lfk.init=iid");  // creates the section
  apply_override(doc, R"(attention.layers={"1": {"kind": "softmax"}})");
  const RunConfig o = parse_config(doc);
  EXPECT_EQ(o.attention.darkformer.rank, 8);
  EXPECT_EQ(o.attention.darkformer.scope, attention::MatrixScope::layer);
  EXPECT_EQ(o.attention.lfk.init, attention::FeatureDraw::iid);
  ASSERT_EQ(o.attention.layers.size(), 1u);
  EXPECT_EQ(o.attention.layers[0].settings, json::parse(R"({"kind": "softmax"})"));

  EXPECT_EQ(parse_error(R"({"attention": {"darkformer": {"scope": "model"}}})"),
            R"(config: attention.darkformer.scope: "model" is not one of head, layer)");
  EXPECT_EQ(parse_error(R"({"attention": {"darkformer": {"rank": -1}}})"),
            "config: attention.darkformer.rank: expected a non-negative integer, got -1");
  EXPECT_EQ(parse_error(R"({"attention": {"eps": 0}})"), "config: attention.eps: expected a number > 0, got 0");
  EXPECT_EQ(parse_error(R"({"attention": {"darkformer": 4}})"),
            "config: attention.darkformer: expected an object, got 4");
  json wrong = json::parse(R"({"attention": {"darkformer": 4}})");
  EXPECT_EQ(error_of([&] { apply_override(wrong, "attention.darkformer.rank=8"); }),
            "config: attention.darkformer: expected an object, got 4");
}

TEST(Config, NestedUnknownKeysSuggestTheClosest) {
  EXPECT_EQ(parse_error(R"({"attention": {"darkformer": {"rnak": 8}}})"),
            "config: attention.darkformer.rnak: unknown key (did you mean attention.darkformer.rank?)");
  EXPECT_EQ(parse_error(R"({"attention": {"darkformr": {"rank": 8}}})"),
            "config: attention.darkformr: unknown key (did you mean attention.darkformer?)");
  EXPECT_EQ(parse_error(R"({"attention": {"darkformer": {"xyzzy": 1}}})"),
            "config: attention.darkformer.xyzzy: unknown key (attention.darkformer has: scope, rank, init)");
  json any = json::object();
  EXPECT_EQ(error_of([&] { apply_override(any, "attention.darkformer.rnak=8"); }),
            "config: attention.darkformer.rnak: unknown key (did you mean attention.darkformer.rank?)");
  EXPECT_EQ(error_of([&] { apply_override(any, "attention.lfk.xyzzy=1"); }),
            "config: attention.lfk.xyzzy: unknown key (attention.lfk has: init)");
}

TEST(Config, PerLayerOverrides) {
  const RunConfig c = parse_config(json::parse(R"({"model": {"n_layers": 6}, "attention": {"kind": "performer",
      "num_features": 32, "layers": {"0-1": {"kind": "softmax"},
                                     "5": {"num_features": 1.28e2, "darkformer": {"rank": 16}}}}})"));
  ASSERT_EQ(c.attention.layers.size(), 2u);
  EXPECT_EQ(c.attention.layers[0].first, 0);
  EXPECT_EQ(c.attention.layers[0].last, 1);
  EXPECT_EQ(c.attention.layers[0].settings, json::parse(R"({"kind": "softmax"})"));
  EXPECT_EQ(c.attention.layers[1].first, 5);
  EXPECT_EQ(c.attention.layers[1].last, 5);
  // Stored as the setters read them: 1.28e2 is the integer 128.
  EXPECT_EQ(c.attention.layers[1].settings, json::parse(R"({"num_features": 128, "darkformer": {"rank": 16}})"));
  EXPECT_EQ(c.attention.kind, attention::Kind::performer);  // the base is untouched

  for (int layer = 0; layer < 6; ++layer) {
    const attention::AttentionConfig a = attention_for_layer(c, layer);
    SCOPED_TRACE(layer);
    EXPECT_TRUE(a.layers.empty());
    EXPECT_EQ(a.kind, layer <= 1 ? attention::Kind::softmax : attention::Kind::performer);
    EXPECT_EQ(a.num_features, layer == 5 ? 128 : 32);
    EXPECT_EQ(a.darkformer.rank, layer == 5 ? 16 : 0);
    EXPECT_EQ(a.darkformer.scope, attention::MatrixScope::head);  // not overridden anywhere
  }
}

// gemma3: heads of any width, local layers (all but every sliding_window_pattern-th) keep
// exact windowed softmax under a random-feature kind unless windowed_layers is "same" (the
// kind through the window, on the CPU and the GPU).
TEST(Config, Gemma3FamilyAndWindowedLayers) {
  const RunConfig c = parse_config(json::parse(R"({"model": {"family": "gemma3", "d_model": 40, "n_heads": 4,
      "head_dim": 16, "n_layers": 6, "sliding_window_pattern": 3}, "attention": {"kind": "darkformer",
      "proposal": "variance_optimal", "layers": {"4": {"kind": "lfk", "proposal": "isotropic"}}}})"));
  EXPECT_EQ(c.model.head_size(), 16);
  for (int layer = 0; layer < 6; ++layer) {
    SCOPED_TRACE(layer);
    const bool global = layer == 2 || layer == 5;
    EXPECT_EQ(c.model.is_local_layer(layer), !global);
    EXPECT_EQ(c.model.window_of(layer), global ? 0 : 512);
    EXPECT_EQ(c.model.rope_theta_of(layer), global ? 10000.0 : c.model.rope_local_theta);
    EXPECT_EQ(keeps_windowed_softmax(c, layer), !global);
    const attention::AttentionConfig a = attention_for_layer(c, layer);
    EXPECT_EQ(a.kind, global ? attention::Kind::darkformer : attention::Kind::softmax);
    EXPECT_EQ(a.proposal, global ? attention::Proposal::variance_optimal : attention::Proposal::isotropic);
  }
  // The llama family has no local layers, whatever the window keys say.
  const RunConfig llama = parse_config(json::parse(R"({"model": {"sliding_window_pattern": 2},
      "attention": {"kind": "performer"}})"));
  EXPECT_FALSE(llama.model.is_local_layer(0));
  EXPECT_EQ(attention_for_layer(llama, 0).kind, attention::Kind::performer);

  // "same": the kind on every layer (windowed random-feature attention when the window binds,
  // i.e. data.seq_len > model.sliding_window; it has CUDA kernels, so a GPU run is accepted).
  const RunConfig same = parse_config(json::parse(R"({"model": {"family": "gemma3", "n_layers": 2},
      "attention": {"kind": "performer", "windowed_layers": "same"}})"));
  EXPECT_FALSE(keeps_windowed_softmax(same, 0));
  EXPECT_EQ(attention_for_layer(same, 0).kind, attention::Kind::performer);
  EXPECT_NO_THROW(parse_config(json::parse(R"({"model": {"family": "gemma3", "n_layers": 2, "sliding_window": 64},
      "data": {"seq_len": 128}, "training": {"device": "cuda"}, "attention": {"kind": "performer",
      "windowed_layers": "same"}})")));
  EXPECT_NO_THROW(parse_config(json::parse(R"({"model": {"family": "gemma3", "n_layers": 2},
      "attention": {"windowed_layers": "same"}})")));
  EXPECT_EQ(parse_error(R"({"model": {"d_model": 40, "n_heads": 3}})"),
            "config: model.n_heads: 3 does not divide model.d_model (40); set model.head_dim to use heads of another "
            "width");
  EXPECT_EQ(parse_error(R"({"model": {"head_dim": 15}})"),
            "config: model.head_dim: 15 is odd; RoPE rotates pairs of dimensions");
  EXPECT_EQ(parse_error(R"({"model": {"family": "gemma2"}})").substr(0, 34), "config: model.family: \"gemma2\" is ");
}

TEST(Config, PerLayerOverrideErrors) {
  const auto with_layers = [](const std::string& layers) {
    return parse_error(R"({"attention": {"layers": )" + layers + "}}");
  };
  for (const std::string key : {"2-1", "1-1", "a", "-1", "01", "1-", "1-2-3", "", " 1"}) {
    EXPECT_EQ(with_layers("{\"" + key + "\": {}}"),
              "config: attention.layers." + key +
                  R"(: expected a layer ("3") or an inclusive range first-last with first < last ("0-1"))");
  }
  EXPECT_EQ(with_layers(R"({"4": {}})"), "config: attention.layers.4: layer 4 does not exist (model.n_layers = 4)");
  EXPECT_EQ(with_layers(R"({"2-7": {}})"),
            "config: attention.layers.2-7: layer 7 does not exist (model.n_layers = 4)");
  EXPECT_EQ(with_layers(R"({"0-2": {}, "2-3": {}})"),
            "config: attention.layers.2-3: overlaps attention.layers.0-2 (both cover layer 2)");
  EXPECT_EQ(with_layers(R"({"0-3": {}, "2": {}})"),
            "config: attention.layers.2: overlaps attention.layers.0-3 (both cover layer 2)");
  EXPECT_EQ(with_layers(R"({"0": {}, "1-2": {}, "3": {}})"), "");  // adjacent ranges are fine
  EXPECT_EQ(with_layers(R"({"0-1": {"kind": "soft"}})"),
            R"(config: attention.layers.0-1.kind: "soft" is not one of softmax, performer, lfk, darkformer)");
  EXPECT_EQ(with_layers(R"({"0-1": {"num_feature": 8}})"),
            "config: attention.layers.0-1.num_feature: unknown key (did you mean num_features?)");
  EXPECT_EQ(with_layers(R"({"3": {"darkformer": {"rank": "8"}}})"),
            R"(config: attention.layers.3.darkformer.rank: expected an integer, got "8")");
  EXPECT_EQ(with_layers(R"({"3": {"darkformer": {"rnak": 8}}})"),
            "config: attention.layers.3.darkformer.rnak: unknown key (did you mean darkformer.rank?)");
  EXPECT_EQ(with_layers(R"({"3": {"darkformer": 2}})"),
            "config: attention.layers.3.darkformer: expected an object, got 2");
  EXPECT_EQ(with_layers(R"({"3": {"layers": {}}})"),
            "config: attention.layers.3.layers: not allowed inside a per-layer override");
  EXPECT_EQ(with_layers(R"({"3": "softmax"})"),
            R"(config: attention.layers.3: expected an object of attention keys, got "softmax")");
  EXPECT_EQ(with_layers("[1]"),
            "config: attention.layers: expected an object mapping layers to attention keys, got [1]");

  // validate_config checks overrides built in code the same way.
  RunConfig c = parse_config(json::object());
  c.attention.layers = {{3, 2, json::object()}};
  EXPECT_EQ(error_of([&] { validate_config(c); }),
            R"(config: attention.layers.3-2: expected a layer ("3") or an inclusive range first-last )"
            R"(with first < last ("0-1"))");
  c.attention.layers = {{1, 1, json{{"kind", "sofmax"}}}};
  EXPECT_EQ(error_of([&] { validate_config(c); }),
            R"(config: attention.layers.1.kind: "sofmax" is not one of softmax, performer, lfk, darkformer)");
}

TEST(Config, AttentionCrossFieldRules) {
  // The default model's head dimension is 256 / 4 = 64.
  EXPECT_EQ(parse_error(R"({"attention": {"darkformer": {"rank": 65}}})"),
            "config: attention.darkformer.rank: 65 exceeds the head dimension model.d_model / model.n_heads = 64");
  EXPECT_EQ(parse_error(R"({"attention": {"kind": "lfk", "mode": "exact"}})"),
            R"(config: attention.mode: "exact" cannot be used with kind "lfk": LFK learns its feature map, )"
            "so there is no fixed kernel to evaluate exactly");
  for (const std::string kind : {"lfk", "softmax"}) {
    EXPECT_EQ(parse_error(R"({"attention": {"kind": ")" + kind + R"(", "proposal": "variance_optimal"}})"),
              R"(config: attention.proposal: "variance_optimal" cannot be used with kind ")" + kind +
                  R"(": only performer and darkformer draw random features (lfk learns them, softmax has none))");
  }
  EXPECT_EQ(parse_error(R"({"attention": {"kind": "performer", "mode": "exact", "proposal": "variance_optimal"}})"),
            R"(config: attention.proposal: "variance_optimal" cannot be used with mode "exact": )"
            "exact attention draws no features");
  for (const char* allowed : {
           R"({"attention": {"darkformer": {"rank": 64}}})",
           R"({"attention": {"kind": "performer", "mode": "exact"}})",
           R"({"attention": {"kind": "darkformer", "mode": "exact"}})",
           R"({"attention": {"kind": "performer", "proposal": "variance_optimal"}})",
           R"({"attention": {"kind": "darkformer", "proposal": "variance_optimal"}})",
       }) {
    EXPECT_NO_THROW(parse_config(json::parse(allowed))) << allowed;
  }

  // Each override's effective settings (base plus override) obey the same rules; errors name
  // the override.
  EXPECT_EQ(parse_error(R"({"attention": {"kind": "performer", "mode": "exact",
                                           "layers": {"1-2": {"kind": "lfk"}}}})"),
            R"(config: attention.layers.1-2.mode: "exact" cannot be used with kind "lfk": LFK learns its )"
            "feature map, so there is no fixed kernel to evaluate exactly");
  EXPECT_EQ(parse_error(R"({"attention": {"layers": {"3": {"darkformer": {"rank": 80}}}}})"),
            "config: attention.layers.3.darkformer.rank: 80 exceeds the head dimension model.d_model / "
            "model.n_heads = 64");
  EXPECT_EQ(parse_error(R"({"attention": {"kind": "performer", "proposal": "variance_optimal",
                                           "layers": {"0": {"kind": "softmax"}}}})"),
            R"(config: attention.layers.0.proposal: "variance_optimal" cannot be used with kind "softmax": )"
            "only performer and darkformer draw random features (lfk learns them, softmax has none)");
  // An override that changes the kind can also reset the options its kind refuses.
  EXPECT_NO_THROW(parse_config(json::parse(R"({"attention": {"kind": "performer", "proposal": "variance_optimal",
      "layers": {"0": {"kind": "softmax", "proposal": "isotropic"}}}})")));
}

TEST(Config, JsonRoundTripWithNestedKeysAndOverrides) {
  const json doc = json::parse(R"({"model": {"n_layers": 6}, "attention": {"kind": "darkformer",
      "darkformer": {"rank": 32, "scope": "layer"}, "lfk": {"init": "iid"},
      "layers": {"0-1": {"kind": "softmax"}, "5": {"num_features": 2e2, "darkformer": {"init": "whiten"}}}}})");
  const json resolved = to_json(parse_config(doc, "rt"));
  EXPECT_EQ(resolved["attention"]["darkformer"],
            json::parse(R"({"scope": "layer", "rank": 32, "init": "identity"})"));
  EXPECT_EQ(resolved["attention"]["lfk"], json::parse(R"({"init": "iid"})"));
  EXPECT_EQ(resolved["attention"]["layers"],
            json::parse(R"({"0-1": {"kind": "softmax"},
                            "5": {"num_features": 200, "darkformer": {"init": "whiten"}}})"));
  // Through text, as config.json is read back.
  EXPECT_EQ(to_json(parse_config(json::parse(resolved.dump()), "other")), resolved);
}

TEST(Config, FilesAndWriteResolved) {
  TempDir dir;
  // Missing file.
  EXPECT_EQ(error_of([&] { load_config(dir / "missing.json"); }),
            "config: cannot read " + (dir / "missing.json") + ": No such file or directory");
  EXPECT_EQ(error_of([&] { load_config(dir.path()); }),
            "config: cannot read " + dir.path().string() + ": it is a directory");
  // Unparsable JSON: line and column of the error.
  write_text(dir / "broken.json", "{\n  \"model\": {\"d_model\": 64},\n  \"seed\": ,\n}\n");
  const std::string e = error_of([&] { load_config(dir / "broken.json"); });
  EXPECT_EQ(e.rfind("config: " + (dir / "broken.json") +
                        ": invalid JSON at line 3, column 11: syntax error",
                    0),
            0u)
      << e;
  // A number past double's range: nlohmann's out_of_range used to escape (found by fuzzing).
  write_text(dir / "huge.json", R"({"seed": 1e999})");
  EXPECT_EQ(error_of([&] { load_config(dir / "huge.json"); }),
            "config: " + (dir / "huge.json") + ": invalid JSON: number overflow parsing '1e999'");
  // Nesting past 64 levels is refused while parsing: 300000 levels used to overflow the stack
  // when the error message printed the document (found with tests/fuzz/fuzz_config).
  write_text(dir / "deep.json", std::string(300000, '[') + std::string(300000, ']'));
  EXPECT_EQ(error_of([&] { load_config(dir / "deep.json"); }),
            "config: " + (dir / "deep.json") + ": invalid JSON: JSON nested deeper than 64 levels");
  json doc = json::object();
  EXPECT_EQ(error_of([&] { apply_override(doc, "optimizer.betas=" + std::string(100, '[') + std::string(100, ']')); }),
            "config: optimizer.betas: override value: JSON nested deeper than 64 levels");
  // Comments are allowed; overrides apply; the stem names the run folder.
  write_text(dir / "tiny.json", R"(// a tiny run
{
  "model": {"d_model": 64, "n_heads": 2},  /* small enough for the CPU */
  "training": {"steps": 20, "log_interval": 5},
  "schedule": {"warmup_steps": 2}
})");
  const RunConfig c = load_config(dir / "tiny.json", {"training.steps=30", "seed=3"});
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.d_ff, 192);
  EXPECT_EQ(c.training.steps, 30);
  EXPECT_EQ(c.seed, 3u);
  EXPECT_EQ(c.output.dir, "runs/tiny");
  EXPECT_EQ(error_of([&] { load_config(dir / "tiny.json", {"training.step=30"}); }),
            "config: training.step: unknown key (did you mean training.steps?)");

  // write_resolved: config.json in the (new) run folder, nothing else; loads back identically.
  const fs::path run = dir / "runs/tiny";
  write_resolved(c, run);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(run)) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"config.json"});
  const RunConfig again = load_config(run / "config.json");
  EXPECT_EQ(to_json(again), to_json(c));
  EXPECT_EQ(json::parse(read_file(run / "config.json")), to_json(c));
}

TEST(Config, Tables) {
  const std::string md = config_markdown_table();
  EXPECT_EQ(md.rfind("| key | type | default | allowed | description |\n|---|---|---|---|---|\n", 0), 0u);
  EXPECT_EQ(static_cast<std::size_t>(std::count(md.begin(), md.end(), '\n')), config_keys().size() + 2);
  EXPECT_NE(md.find("| `model.d_model` | integer | `256` | >= 1 | width of the residual stream |"),
            std::string::npos);
  EXPECT_NE(md.find("| `optimizer.name` | string | `\"adamw\"` | adamw, sgd | optimizer |"),
            std::string::npos);
  EXPECT_NE(md.find("| `model.dropout` | number | `0.0` | [0, 1) | dropout probability |"),
            std::string::npos);
  EXPECT_NE(md.find("`[\"*norm*\",\"*embed_tokens*\",\"*feature_map*\"]`"), std::string::npos);
  EXPECT_NE(md.find("\"\" = runs/&lt;config file stem>"), std::string::npos);
  EXPECT_NE(md.find("| `attention.darkformer.scope` | string | `\"head\"` | head, layer | DARKFormer: "),
            std::string::npos);
  EXPECT_NE(md.find("| `attention.layers` | object | `{}` | layer or range -> attention keys | per-layer "),
            std::string::npos);

  RunConfig c = parse_config(json::parse(R"({"training": {"steps": 50}, "schedule": {"warmup_steps": 5},
      "attention": {"layers": {"1": {"kind": "softmax"}}}})"),
                             "t");
  const std::string table = config_table(c);
  EXPECT_EQ(static_cast<std::size_t>(std::count(table.begin(), table.end(), '\n')), config_keys().size());
  // Keys padded to the longest key (finetune.transfer.checkpoint_interval) plus two spaces.
  const auto row = [](const std::string& key, const std::string& rest) {
    return key + std::string(std::string("finetune.transfer.checkpoint_interval").size() + 2 - key.size(), ' ') +
           rest + "\n";
  };
  EXPECT_NE(table.find(row("training.steps", "50  (default 1000)")), std::string::npos) << table;
  EXPECT_NE(table.find(row("training.batch_size", "16")), std::string::npos) << table;
  EXPECT_NE(table.find(row("model.d_ff", "704  (default 0)")), std::string::npos) << table;
  EXPECT_NE(table.find(row("output.dir", "\"runs/t\"  (default \"\")")), std::string::npos) << table;
  EXPECT_NE(table.find(row("attention.layers", R"({"1":{"kind":"softmax"}}  (default {}))")), std::string::npos)
      << table;
}

TEST(Config, DistributedSection) {
  const RunConfig c = parse_config(json::parse(R"({"distributed": {"backend": "mpi", "bucket_mb": 4, "zero_stage": 1}})"));
  EXPECT_EQ(c.distributed.backend, dist::BackendKind::mpi);
  EXPECT_EQ(c.distributed.bucket_mb, 4.0);
  EXPECT_EQ(c.distributed.zero_stage, 1);
  EXPECT_EQ(c.distributed.timeout_s, 600.0);
  EXPECT_EQ(parse_config(json::object()).distributed.backend, dist::BackendKind::automatic);
  EXPECT_EQ(parse_error(R"({"distributed": {"backend": "gloo"}})"),
            "config: distributed.backend: \"gloo\" is not one of auto, single, mpi, nccl");
  EXPECT_EQ(parse_error(R"({"distributed": {"zero_stage": 2}})"),
            "config: distributed.zero_stage: 2 is not supported: use 0 or 1");
  EXPECT_EQ(parse_error(R"({"distributed": {"bucket_mb": 0}})"),
            "config: distributed.bucket_mb: expected a number > 0, got 0");
}

}  // namespace
}  // namespace dark::train
