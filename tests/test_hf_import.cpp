// Hugging Face folders: import of one written by transformers itself (tests/reference/
// hf_llama_tiny, made by make_hf_llama.py) against transformers' logits and the tokenizers
// library's ids; export-hf then import giving identical logits and the same tokenizer;
// tokenizer.json written and read back; finetuning from a folder end to end; F16 safetensors;
// and the errors for what we do not implement.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attention/random_features.h"
#include "autograd/grad_mode.h"
#include "core/file_io.h"
#include "data/hf_tokenizer_json.h"
#include "data/sentencepiece_tokenizer.h"
#include "tests/test_util.h"
#include "tests/train_test_util.h"
#include "train/formats/checkpoint.h"
#include "train/cli/commands.h"
#include "train/config.h"
#include "train/swap/finetune.h"
#include "train/formats/hf_export.h"
#include "train/formats/hf_import.h"
#include "train/model_builder.h"
#include "train/formats/safetensors.h"
#include "train/trainer.h"

namespace dark::train {
namespace {

namespace fs = std::filesystem;
using dark::testing::expect_error;
using dark::testing::TempDir;
using nlohmann::json;

const fs::path kFolder = fs::path(DARK_TEST_DATA_DIR) / "hf_llama_tiny";
const char* kRegenerate = "regenerate with tests/reference/make_hf_llama.py";

json reference() { return json::parse(read_file(fs::path(DARK_TEST_DATA_DIR) / "hf_llama_tiny.json")); }

// A model of the source's architecture holding its weights, in eval mode.
std::unique_ptr<nn::CausalLM> model_from(const InitSource& source) {
  RunConfig config;
  config.model = source.model;
  config.data.seq_len = 16;
  config.model.max_seq_len = 64;
  auto model = build_model(config);
  load_source_weights(*model, source);
  model->train(false);
  return model;
}

std::vector<float> logits_of(nn::CausalLM& model, const std::vector<std::int32_t>& ids) {
  NoGradGuard no_grad;
  return model.forward(Tensor::from_vector(ids, {1, static_cast<std::int64_t>(ids.size())})).to_vector<float>();
}

void copy_folder(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

TEST(HfImport, TransformersFolderGivesTransformersLogits) {
  const json ref = reference();
  ASSERT_TRUE(formats::is_hf_model_folder(kFolder.string()));
  const InitSource source = load_init_source(kFolder.string());
  EXPECT_EQ(source.model.n_heads, 4);
  EXPECT_EQ(source.model.n_kv_heads, 2);
  EXPECT_EQ(source.model.rope_theta, 500.0);  // transformers 5 writes it under rope_parameters
  EXPECT_EQ(source.model.norm_eps, 1e-5);
  EXPECT_FALSE(source.model.tie_embeddings);
  EXPECT_EQ(source.model.mlp, nn::MlpKind::swiglu);
  auto model = model_from(source);
  const auto ids = ref.at("ids").get<std::vector<std::int32_t>>();
  const std::vector<float> ours = logits_of(*model, ids);
  const auto want = ref.at("logits").get<std::vector<std::vector<double>>>();
  ASSERT_EQ(want.size(), ids.size());
  const std::size_t V = want[0].size();
  ASSERT_EQ(ours.size(), ids.size() * V);
  double worst = 0, scale = 0;
  for (std::size_t t = 0; t < ids.size(); ++t)
    for (std::size_t v = 0; v < V; ++v) {
      worst = std::max(worst, std::fabs(ours[t * V + v] - want[t][v]));
      scale = std::max(scale, std::fabs(want[t][v]));
    }
  RecordProperty("max_abs_difference", std::to_string(worst));
  EXPECT_GT(scale, 0.5) << "degenerate reference logits";
  EXPECT_LT(worst, 1e-5 * scale) << "our logits differ from transformers' by " << worst << "; " << kRegenerate;
}

TEST(HfImport, TransformersTokenizerGivesTheTokenizersLibrarysIds) {
  const json ref = reference();
  const formats::HfTokenizerFile file = formats::hf_tokenizer_file(kFolder.string());
  EXPECT_EQ(file.kind, data::TokenizerKind::hf);
  const auto tok = data::load_tokenizer(file.kind, file.path);
  EXPECT_EQ(tok->kind(), "hf");
  EXPECT_EQ(tok->bos_id(), ref.at("bos_id").get<int>());
  EXPECT_EQ(tok->eos_id(), ref.at("eos_id").get<int>());
  for (const json& e : ref.at("encodings")) {
    const std::string text = e.at("text");
    EXPECT_EQ(tok->encode(text), e.at("ids").get<std::vector<std::int32_t>>()) << text;
    if (text.find("<|") == std::string::npos) EXPECT_EQ(tok->decode(tok->encode(text)), text);
  }
  // The init source records the folder's tokenizer, which the run's data must then use.
  EXPECT_EQ(load_init_source(kFolder.string()).tokenizer_hash, tok->hash());
}

TEST(HfTokenizerJson, WrittenAndReadBackIsTheSameTokenizer) {
  const auto theirs = data::load_hf_tokenizer((kFolder / "tokenizer.json").string());
  const data::BpeVocab& v = theirs->vocab();
  const std::string text = data::hf_tokenizer_json(v);
  data::BpeVocab back = data::parse_hf_tokenizer_json(text, "written");
  EXPECT_EQ(back.tokens, v.tokens);
  EXPECT_EQ(back.merges, v.merges);  // read from ["a", "b"] pairs, written as "a b"
  EXPECT_EQ(back.token_types, v.token_types);
  EXPECT_EQ(back.pre, "smollm");
  back.bos_id = v.bos_id, back.eos_id = v.eos_id;
  EXPECT_EQ(data::BpeTokenizer(back).hash(), theirs->hash());

  data::BpeVocab gpt2 = v;
  gpt2.pre = "gpt2";
  EXPECT_EQ(data::parse_hf_tokenizer_json(data::hf_tokenizer_json(gpt2), "gpt2").pre, "gpt2");
  // A vocabulary of SmolLM2's size goes through in well under a second (an insert that
  // searched the written keys would make this quadratic).
  data::BpeVocab large = data::byte_tokenizer_vocab();
  for (int i = 0; i < 60000; ++i) large.tokens.push_back("\xC4\xA0w" + std::to_string(i));
  large.token_types.resize(large.tokens.size(), static_cast<std::int32_t>(data::BpeTokenType::normal));
  EXPECT_EQ(data::parse_hf_tokenizer_json(data::hf_tokenizer_json(large), "large").tokens, large.tokens);

  data::BpeVocab twice = v;
  twice.tokens[5] = twice.tokens[6];
  expect_error([&] { data::hf_tokenizer_json(twice); }, {"is both id 5 and id 6"});
}

TEST(HfTokenizerJson, ByteTokenizerVocabEncodesLikeTheByteTokenizer) {
  const data::BpeTokenizer bpe(data::byte_tokenizer_vocab());
  const data::ByteTokenizer bytes;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  for (const std::string s : {std::string("hello  world\n\n\tx"), std::string("caf\xc3\xa9 \xe6\x97\xa5 \xff\xfe"), all,
                              std::string("12345 don't")}) {
    EXPECT_EQ(bpe.encode(s), bytes.encode(s));
    EXPECT_EQ(bpe.decode(bpe.encode(s)), s);
  }
  EXPECT_EQ(bpe.eos_id(), bytes.eos_id());
  EXPECT_EQ(bpe.bos_id(), bytes.bos_id());
  EXPECT_EQ(bpe.vocab_size(), bytes.vocab_size());
}

TEST(HfTokenizerJson, UnsupportedFeaturesAreErrorsNamingTheKey) {
  const json good = json::parse(read_file(kFolder / "tokenizer.json"));
  auto error_of = [&](const std::function<void(json&)>& edit) {
    json doc = good;
    edit(doc);
    try {
      data::parse_hf_tokenizer_json(doc.dump(), "t.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  std::string m = error_of([](json& d) { d["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}}; });
  EXPECT_TRUE(has(m, "pre_tokenizer.type: \"Metaspace\" is not supported")) << m;
  m = error_of([](json& d) { d["model"]["byte_fallback"] = true; });
  EXPECT_TRUE(has(m, "model.byte_fallback")) << m;
  m = error_of([](json& d) { d["model"]["type"] = "Unigram"; });
  EXPECT_TRUE(has(m, "model.type: \"Unigram\" is not supported")) << m;
  m = error_of([](json& d) { d["normalizer"] = {{"type", "NFC"}}; });
  EXPECT_TRUE(has(m, "normalizer")) << m;
  m = error_of([](json& d) { d["model"]["ignore_merges"] = true; });
  EXPECT_TRUE(has(m, "model.ignore_merges")) << m;
  m = error_of([](json& d) { d["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; });
  EXPECT_TRUE(has(m, "pre_tokenizer.pretokenizers[1].add_prefix_space")) << m;
  m = error_of([](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false; });
  EXPECT_TRUE(has(m, "individual_digits")) << m;
  m = error_of([](json& d) { d["added_tokens"][0]["lstrip"] = true; });
  EXPECT_TRUE(has(m, "added_tokens[0].lstrip")) << m;
  m = error_of([](json& d) { d["decoder"] = {{"type", "Metaspace"}}; });
  EXPECT_TRUE(has(m, "t.json: decoder")) << m;
  m = error_of([](json& d) { d["model"]["vocab"].erase("a"); });
  EXPECT_TRUE(has(m, "model.vocab: no token has id")) << m;

  // Without an eos token anywhere beside tokenizer.json there is nothing to end documents.
  TempDir tmp;
  write_file_atomic(tmp / "tokenizer.json", good.dump());
  expect_error([&] { data::load_hf_tokenizer(tmp / "tokenizer.json"); }, {"names no end-of-sequence token"});
  write_file_atomic(tmp / "config.json", R"({"eos_token_id": [2, 0]})");
  EXPECT_EQ(data::load_hf_tokenizer(tmp / "tokenizer.json")->eos_id(), 2);
  write_file_atomic(tmp / "tokenizer_config.json", R"({"eos_token": {"content": "<nope>"}})");
  expect_error([&] { data::load_hf_tokenizer(tmp / "tokenizer.json"); }, {"eos_token '<nope>' is not in"});
}

// The Llama config.json keys our model does not implement are errors naming the key.
TEST(HfImport, UnsupportedConfigIsAnErrorNamingTheKey) {
  TempDir tmp;
  const json good = json::parse(read_file(kFolder / "config.json"));
  auto expect_config_error = [&](const std::function<void(json&)>& edit, const std::vector<std::string>& parts) {
    copy_folder(kFolder, tmp.path() / "m");
    json doc = good;
    edit(doc);
    write_file_atomic(tmp.path() / "m/config.json", doc.dump());
    SCOPED_TRACE(parts.front());
    expect_error([&] { formats::import_hf_llama(tmp / "m"); }, parts);
  };
  expect_config_error([](json& d) { d["rope_parameters"]["rope_type"] = "llama3"; },
                      {"config.json: rope_parameters: rope_type \"llama3\" (scaled RoPE) is not supported"});
  expect_config_error([](json& d) { d["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }, {"rope_scaling"});
  expect_config_error([](json& d) { d["attention_bias"] = true; }, {"attention_bias: true is not supported"});
  expect_config_error([](json& d) { d["mlp_bias"] = true; }, {"mlp_bias"});
  expect_config_error([](json& d) { d["model_type"] = "mistral"; }, {"model_type: \"mistral\" is not supported"});
  expect_config_error([](json& d) { d["architectures"] = {"LlamaForSequenceClassification"}; }, {"architectures"});
  expect_config_error([](json& d) { d["hidden_act"] = "relu"; }, {"hidden_act: \"relu\" is not supported"});
  expect_config_error([](json& d) { d["head_dim"] = 16; }, {"head_dim: 16 differs from"});
  expect_config_error([](json& d) { d["rope_parameters"]["partial_rotary_factor"] = 0.5; }, {"partial_rotary_factor"});
  expect_config_error([](json& d) { d.erase("hidden_size"); }, {"hidden_size: missing"});

  // Weights: a tensor missing from the shard the index names; no weights at all.
  copy_folder(kFolder, tmp.path() / "m");
  json index = json::parse(read_file(kFolder / "model.safetensors.index.json"));
  json& shard = index["weight_map"]["model.norm.weight"];
  shard = shard == "model-00001-of-00003.safetensors" ? "model-00002-of-00003.safetensors"
                                                      : "model-00001-of-00003.safetensors";
  write_file_atomic(tmp.path() / "m/model.safetensors.index.json", index.dump());
  expect_error([&] { formats::import_hf_llama(tmp / "m"); }, {"'model.norm.weight', which model.safetensors.index.json"});
  fs::remove(tmp.path() / "m/model.safetensors.index.json");
  expect_error([&] { formats::import_hf_llama(tmp / "m"); }, {"has neither model.safetensors nor model.safetensors.index.json"});

  // A wrong shape reaches load_source_weights, which names the tensor.
  copy_folder(kFolder, tmp.path() / "v");
  json config = good;
  config["vocab_size"] = good["vocab_size"].get<int>() + 1;
  write_file_atomic(tmp.path() / "v/config.json", config.dump());
  expect_error([&] { model_from(load_init_source(tmp / "v")); }, {"model.embed_tokens.weight' has shape"});
}

TEST(HfImport, Float16SafetensorsReadAsExactFloat32) {
  TempDir tmp;
  // 1, -2, 0.5, 65504 (largest half), 2^-24 (smallest subnormal), -0
  const std::uint16_t halves[] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000};
  const std::string header = R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(halves), sizeof halves);
  write_file_atomic(tmp / "h.safetensors", bytes);
  const Tensor w = formats::load_safetensors(tmp / "h.safetensors").tensors.at("w");
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f, std::ldexp(1.0f, -24), -0.0f}));
  EXPECT_TRUE(std::signbit(w.to_vector<float>()[5]));
}

RunConfig tiny_model_config(bool tie) {
  return parse_config(json{{"model", {{"vocab_size", 0}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 4}, {"n_kv_heads", 2},
                                      {"d_ff", 64}, {"tie_embeddings", tie}, {"rope_theta", 300.0}}},
                           {"data", {{"tokenizer", "byte"}, {"seq_len", 16}}},
                           {"seed", 5}});
}

// export-hf's folder imports back to the same logits and the same tokenizer, for each kind.
TEST(HfExport, ExportThenImportGivesIdenticalLogitsAndTokenizer) {
  TempDir tmp;
  std::vector<std::string> lines;
  for (int i = 0; i < 4; ++i) {
    const std::string text = dark::testing::generated_text(200, i);
    for (std::size_t s = 0, e; s < text.size(); s = e + 1) {
      e = text.find('\n', s);
      if (e == std::string::npos) e = text.size();
      if (e > s) lines.push_back(text.substr(s, e - s));
    }
  }
  data::SentencePieceOptions sp_options;
  sp_options.vocab_size = 300;
  const auto sentencepiece = data::SentencePieceTokenizer::train(lines, sp_options);
  const auto bpe = data::load_hf_tokenizer((kFolder / "tokenizer.json").string());
  const data::ByteTokenizer bytes;
  const std::vector<std::pair<std::string, const data::Tokenizer*>> tokenizers = {
      {"sentencepiece", sentencepiece.get()}, {"bpe", bpe.get()}, {"byte", &bytes}};
  for (const auto& [name, tok] : tokenizers) {
    for (const bool tie : {true, false}) {
      SCOPED_TRACE(name + (tie ? " tied" : " untied"));
      RunConfig config = tiny_model_config(tie);
      config.model.vocab_size = tok->vocab_size();
      auto model = build_model(config);
      model->train(false);
      const fs::path out = tmp.path() / (name + (tie ? "-tied" : "-untied"));
      const std::vector<fs::path> files = formats::export_hf(*model, tok, out, /*add_bos=*/false);
      for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json",
                            "special_tokens_map.json"})
        EXPECT_TRUE(fs::exists(out / f)) << f;
      EXPECT_EQ(files.size(), name == "sentencepiece" ? 7u : 6u);  // + tokenizer.model
      const json generation = json::parse(read_file(out / "generation_config.json"));
      EXPECT_EQ(generation.at("eos_token_id"), tok->eos_id());
      EXPECT_EQ(generation.at("do_sample"), false);

      const InitSource source = load_init_source(out.string());
      EXPECT_EQ(source.model.rope_theta, 300.0);
      EXPECT_EQ(source.model.n_kv_heads, 2);
      EXPECT_EQ(source.model.tie_embeddings, tie);
      auto back = model_from(source);
      const std::vector<std::int32_t> ids = {1, 7, 42, 3, 99, 250, 11, 0, 5};
      EXPECT_EQ(logits_of(*back, ids), logits_of(*model, ids));  // bit for bit

      const formats::HfTokenizerFile file = formats::hf_tokenizer_file(out.string());
      const auto reloaded = data::load_tokenizer(file.kind, file.path);
      const std::string text = "The  quick\n\tfox 2024 caf\xc3\xa9 \xe6\x97\xa5";
      EXPECT_EQ(reloaded->encode(text), tok->encode(text));
      EXPECT_EQ(reloaded->eos_id(), tok->eos_id());
      EXPECT_EQ(reloaded->bos_id(), tok->bos_id());
      if (name != "byte") EXPECT_EQ(reloaded->hash(), tok->hash());
      EXPECT_EQ(source.tokenizer_hash, reloaded->hash());
    }
  }
}

// A model with random-feature layers exports as our own architecture: the modeling code beside
// the weights (the files of train/formats/hf_modeling/ as committed), config.json naming it and
// each layer's attention, and the features in force among the weights: the draw of the
// checkpoint's epoch (not epoch 0), a proposal's log-weights, DARKFormer's M, LFK's W without
// a second copy. That transformers runs the folder and gives our logits is
// tests/hf_export_kinds_check.sh's (it needs transformers).
TEST(HfExport, RandomFeatureModelsExportWithTheirModelingCodeAndFeatures) {
  TempDir tmp;
  const fs::path dir = tmp.path();
  const data::ByteTokenizer bytes;
  const fs::path source_dir = fs::path(DARK_TEST_DATA_DIR).parent_path().parent_path() / "train/formats/hf_modeling";
  RunConfig config = parse_config(
      json{{"model", {{"vocab_size", bytes.vocab_size()}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 4},
                      {"n_kv_heads", 2}, {"d_ff", 64}}},
           {"attention", {{"kind", "darkformer"}, {"num_features", 16}, {"exact_window", 4}, {"darkformer", {{"rank", 4}}},
                          {"layers", {{"0", {{"kind", "softmax"}, {"exact_window", 0}}}}}}},
           {"data", {{"tokenizer", "byte"}, {"seq_len", 16}}},
           {"seed", 5}});
  auto model = build_model(config);
  const std::vector<nn::AttentionKernel*> kernels = model->attention_kernels();
  kernels[1]->set_feature_epoch(3);
  formats::export_hf(*model, &bytes, dir / "dark", /*add_bos=*/false);

  for (const char* file : {"modeling_darkformer.py", "configuration_darkformer.py"})
    EXPECT_EQ(read_file(dir / "dark" / file), read_file(source_dir / file)) << file;
  const json hf = json::parse(read_file(dir / "dark/config.json"));
  EXPECT_EQ(hf.at("architectures"), json::array({"DarkformerForCausalLM"}));
  EXPECT_EQ(hf.at("auto_map").at("AutoModelForCausalLM"), "modeling_darkformer.DarkformerForCausalLM");
  EXPECT_EQ(hf.at("family"), "llama");
  EXPECT_EQ(hf.at("use_cache"), false);
  EXPECT_EQ(hf.at("attention_layers").at(0), json({{"kind", "softmax"}}));
  const json& dark = hf.at("attention_layers").at(1);
  EXPECT_EQ(dark.at("kind"), "darkformer");
  EXPECT_EQ(dark.at("mode"), "linear");
  EXPECT_EQ(dark.at("num_features"), 16);
  EXPECT_EQ(dark.at("rank"), 4);
  EXPECT_EQ(dark.at("exact_window"), 4);
  EXPECT_EQ(dark.at("feature_epoch"), 3);
  EXPECT_EQ(dark.at("matrices"), 2);  // one M per key/value head
  EXPECT_EQ(dark.at("log_weight"), false);
  EXPECT_DOUBLE_EQ(dark.at("eps").get<double>(), config.attention.eps);
  // Each setting with the type the kernel gave it (Export::settings is the JSON itself, not
  // numbers typed again by key name in hf_export.cpp).
  for (const char* key : {"num_features", "rank", "exact_window", "feature_epoch", "matrices"})
    EXPECT_TRUE(dark.at(key).is_number_integer()) << key;
  EXPECT_TRUE(dark.at("eps").is_number_float());
  EXPECT_TRUE(dark.at("log_weight").is_boolean());
  EXPECT_EQ(json(kernels[1]->export_form().settings).size() + 1, dark.size());  // the kernel's settings and "kind"
  EXPECT_EQ(json::parse(read_file(dir / "dark/generation_config.json")).at("use_cache"), false);

  const std::map<std::string, Tensor> weights = formats::load_safetensors(dir / "dark/model.safetensors").tensors;
  for (auto& [name, p] : model->named_parameters()) EXPECT_EQ(weights.at(name).to_vector<float>(), p->to_vector<float>()) << name;
  EXPECT_EQ(weights.count("model.layers.0.self_attn.feature_map.omega"), 0u);
  const Tensor omega = weights.at("model.layers.1.self_attn.feature_map.omega");
  ASSERT_EQ(omega.shape(), Shape({2, 16, 4}));
  for (int head = 0; head < 2; ++head) {  // the draw of epoch 3, not of epoch 0
    const Tensor drawn = attention::draw_features(16, 4, attention::FeatureDraw::orthogonal,
                                                  attention::FeatureKey{config.seed, 1, head, 3});
    EXPECT_EQ(core::slice(omega, 0, head, head + 1).contiguous().to_vector<float>(), drawn.to_vector<float>());
    const Tensor first = attention::draw_features(16, 4, attention::FeatureDraw::orthogonal,
                                                  attention::FeatureKey{config.seed, 1, head, 0});
    EXPECT_NE(drawn.to_vector<float>(), first.to_vector<float>());
  }
  EXPECT_EQ(weights.count("model.layers.1.self_attn.feature_map.M"), 1u);
  EXPECT_EQ(weights.count("model.layers.1.self_attn.feature_map.log_weight"), 0u);

  // LFK: its features are the parameter W, written once.
  RunConfig lfk = tiny_model_config(true);
  lfk.model.vocab_size = bytes.vocab_size();
  lfk.attention.kind = attention::Kind::lfk;
  auto lfk_model = build_model(lfk);
  formats::export_hf(*lfk_model, &bytes, dir / "lfk", /*add_bos=*/false);
  const std::map<std::string, Tensor> lfk_weights = formats::load_safetensors(dir / "lfk/model.safetensors").tensors;
  EXPECT_EQ(lfk_weights.count("model.layers.0.self_attn.feature_map.W"), 1u);
  EXPECT_EQ(lfk_weights.count("model.layers.0.self_attn.feature_map.omega"), 0u);
  EXPECT_EQ(json::parse(read_file(dir / "lfk/config.json")).at("attention_layers").at(0).at("kind"), "lfk");

  // A softmax model stays LlamaForCausalLM, with no modeling file.
  RunConfig plain = tiny_model_config(true);
  plain.model.vocab_size = bytes.vocab_size();
  auto softmax = build_model(plain);
  formats::export_hf(*softmax, &bytes, dir / "softmax", /*add_bos=*/false);
  EXPECT_EQ(json::parse(read_file(dir / "softmax/config.json")).at("architectures"), json::array({"LlamaForCausalLM"}));
  EXPECT_FALSE(fs::exists(dir / "softmax/modeling_darkformer.py"));
}

// add_bos (a run that fed bos at every sequence start): tokenizer_config.json says so and
// tokenizer.json puts bos first, for each kind; without it neither adds anything.
TEST(HfExport, AddBosWritesTheBosPostProcessor) {
  TempDir tmp;
  const data::ByteTokenizer bytes;
  std::vector<std::string> lines;
  for (int i = 0; i < 300; ++i) lines.push_back(dark::testing::generated_text(1, i));
  data::SentencePieceOptions sp_options;
  sp_options.vocab_size = 300;
  const auto sentencepiece = data::SentencePieceTokenizer::train(lines, sp_options);
  for (const data::Tokenizer* tok : {static_cast<const data::Tokenizer*>(&bytes),
                                     static_cast<const data::Tokenizer*>(sentencepiece.get())}) {
    for (const bool add_bos : {false, true}) {
      SCOPED_TRACE(tok->kind() + (add_bos ? " add_bos" : ""));
      RunConfig config = tiny_model_config(true);
      config.model.vocab_size = tok->vocab_size();
      auto model = build_model(config);
      const fs::path out = tmp.path() / (tok->kind() + (add_bos ? "-bos" : ""));
      formats::export_hf(*model, tok, out, add_bos);
      EXPECT_EQ(json::parse(read_file(out / "tokenizer_config.json")).at("add_bos_token"), add_bos);
      const json post = json::parse(read_file(out / "tokenizer.json")).at("post_processor");
      if (!add_bos) {
        EXPECT_TRUE(post.is_null());
        continue;
      }
      EXPECT_EQ(post.at("type"), "TemplateProcessing");
      EXPECT_EQ(post.at("special_tokens").at(tok->piece(tok->bos_id())).at("ids"), json::array({tok->bos_id()}));
    }
  }
}

// `darkformer export-hf` on a trained run: the folder holds the checkpoint's weights (same
// logits) and its tokenizer (the byte tokenizer's tokenizer.json).
TEST(HfExport, CommandExportsTheCheckpoint) {
  TempDir tmp;
  json config = tiny_config(tmp, "run", 2);
  config["training"]["generate_tokens"] = 0;
  config["schedule"]["warmup_steps"] = 1;
  train(parse_config(config), {});
  ASSERT_EQ(cli::export_hf_command({"--checkpoint", tmp / "run", "--out", tmp / "hf"}), 0);
  formats::CheckpointData ck = formats::load_checkpoint(formats::find_checkpoint(tmp / "run"));
  InitSource trained;
  trained.model = parse_config(ck.state.at("config")).model;
  trained.parameters = std::move(ck.model);
  const InitSource exported = load_init_source(tmp / "hf");
  const std::vector<std::int32_t> ids = {104, 101, 108, 108, 111, 32, 256};
  EXPECT_EQ(logits_of(*model_from(exported), ids), logits_of(*model_from(trained), ids));
  const formats::HfTokenizerFile file = formats::hf_tokenizer_file(tmp / "hf");
  EXPECT_EQ(data::load_tokenizer(file.kind, file.path)->encode("hello \xff"),
            data::ByteTokenizer().encode("hello \xff"));
  expect_error([&] { cli::export_hf_command({"--checkpoint", tmp / "run"}); }, {"--out"});
}

// finetune.init_from = a Hugging Face folder: the model and its tokenizer (data.tokenizer
// "hf") come from the folder, the run trains, and a run whose data uses another tokenizer
// is refused.
TEST(HfImport, FinetuningFromAFolderUsesItsTokenizer) {
  TempDir tmp;
  json config = tiny_config(tmp, "tuned", 2);
  config["schedule"]["warmup_steps"] = 1;
  config["training"]["generate_tokens"] = 0;
  config.erase("model");
  config["data"].erase("tokenizer");
  config["data"].erase("dir");
  config["finetune"] = {{"init_from", kFolder.string()}};
  RunConfig c = parse_config(config);
  EXPECT_EQ(c.data.tokenizer, data::TokenizerKind::hf);
  EXPECT_EQ(c.data.tokenizer_model, (kFolder / "tokenizer.json").string());
  EXPECT_TRUE(c.data.dir.ends_with("-hf-hf_llama_tiny")) << c.data.dir;  // named by the folder
  c.data.dir = tmp / "data";
  const TrainResult r = train(c, {});
  EXPECT_EQ(r.steps, 2);
  EXPECT_TRUE(std::isfinite(r.final_train_loss));
  const RunConfig saved = parse_config(formats::load_checkpoint(formats::find_checkpoint(tmp / "tuned")).state.at("config"));
  EXPECT_EQ(saved.model.n_kv_heads, 2);
  EXPECT_EQ(saved.model.rope_theta, 500.0);
  // The config says the folder tokenizer's vocabulary, not data.vocab_size's default.
  EXPECT_EQ(saved.data.vocab_size, data::load_tokenizer(c.data.tokenizer, c.data.tokenizer_model)->vocab_size());
  EXPECT_NE(saved.data.vocab_size, data::DataConfig{}.vocab_size);

  json bytes = config;
  bytes["data"]["tokenizer"] = "byte";
  bytes["data"]["dir"] = tmp / "data-bytes";
  bytes["output"]["dir"] = tmp / "bytes";
  expect_error([&] { train(parse_config(bytes), {}); }, {"Hugging Face folder", "this run's data uses byte-v1"});
}

}  // namespace
}  // namespace dark::train
