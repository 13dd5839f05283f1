// The real pretrained models, imported from their GGUF files (fetched by
// scripts/fetch-models.sh into cache/models/) into our CausalLM: SmolLM2-135M-Instruct (Q4_1,
// llama architecture) and Gemma 3 270M (Q4_K_M, gemma3: head dimension 256, one key/value
// head, QK-norm, sandwich norms, sliding-window local layers). Each gives the logits of an
// independent float64 implementation (tests/reference/make_smollm2_reference.py and
// make_gemma3_reference.py: numpy over gguf-py's dequantisation) within 1e-3 relative, the
// same argmax at every position, and its greedy continuation. Skipped, with a message, when
// a model file is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "tests/test_util.h"
#include "train/config.h"
#include "train/formats/gguf_import.h"
#include "train/model_builder.h"

namespace dark::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kReferenceDir = DARK_TEST_DATA_DIR;
const fs::path kModel = kReferenceDir / "../../cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

// One imported model and its reference values.
struct ModelCase {
  const char* name;
  fs::path gguf;
  const char* reference;  // in tests/reference/
  const char* fetch;      // the argument scripts/fetch-models.sh needs for it
};

const ModelCase kCases[] = {
    {"SmolLM2", kModel, "smollm2_logits.json", ""},
    {"Gemma3", kReferenceDir / "../../cache/models/gemma3/gemma-3-270m-q4_k_m.gguf", "gemma3_logits.json", " gemma3"},
};

// The imported model with softmax attention, in eval mode.
std::unique_ptr<nn::CausalLM> imported_model(const fs::path& gguf) {
  formats::ImportedModel imported = formats::import_gguf(gguf.string());
  RunConfig config;
  config.model = imported.model;
  config.data.seq_len = 64;
  config.model.max_seq_len = 64;
  auto model = build_model(config);
  NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters()) p->copy_(imported.parameters.at(name));
  model->train(false);
  return model;
}

Tensor ids_tensor(const std::vector<std::int32_t>& ids) {
  return Tensor::from_vector(ids, {1, static_cast<std::int64_t>(ids.size())});
}

class ImportedGguf : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    if (!fs::exists(GetParam().gguf))
      GTEST_SKIP() << GetParam().gguf.string() << " is absent; run scripts/fetch-models.sh" << GetParam().fetch;
    std::ifstream in(kReferenceDir / GetParam().reference);
    ref = json::parse(in);
  }
  json ref;
};

TEST_P(ImportedGguf, LogitsMatchAnIndependentFloat64Implementation) {
  const std::vector<std::int32_t> ids = ref.at("ids").get<std::vector<std::int32_t>>();
  auto model = imported_model(GetParam().gguf);
  NoGradGuard no_grad;
  const Tensor logits = model->forward(ids_tensor(ids));
  const std::int64_t V = logits.size(2);
  const std::vector<float> ours = logits.to(DType::f32).to_vector<float>();
  const json& positions = ref.at("positions");
  ASSERT_EQ(positions.size(), ids.size());
  double worst = 0;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const auto cols = positions[t].at("columns").get<std::vector<std::int64_t>>();
    const auto want = positions[t].at("logits").get<std::vector<double>>();
    const double scale = positions[t].at("max_abs").get<double>();
    const float* row = ours.data() + static_cast<std::int64_t>(t) * V;
    for (std::size_t c = 0; c < cols.size(); ++c) worst = std::max(worst, std::fabs(row[cols[c]] - want[c]) / scale);
    EXPECT_EQ(std::max_element(row, row + V) - row, positions[t].at("argmax").get<std::int64_t>()) << "position " << t;
  }
  RecordProperty("max_relative_difference", std::to_string(worst));
  std::printf("%s: largest relative logit difference to the float64 reference %.2e over %zu positions\n",
              GetParam().name, worst, ids.size());
  EXPECT_LT(worst, 1e-3);
}

TEST_P(ImportedGguf, GreedyContinuationMatchesTheReference) {
  std::vector<std::int32_t> ids = ref.at("ids").get<std::vector<std::int32_t>>();
  auto model = imported_model(GetParam().gguf);
  NoGradGuard no_grad;
  const auto want = ref.at("greedy_ids").get<std::vector<std::int32_t>>();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const Tensor logits = model->forward(ids_tensor(ids)).to(DType::f32);
    const std::int64_t V = logits.size(2), T = logits.size(1);
    const std::vector<float> l = logits.to_vector<float>();
    const float* last = l.data() + (T - 1) * V;
    ids.push_back(static_cast<std::int32_t>(std::max_element(last, last + V) - last));
  }
  const std::vector<std::int32_t> got(ids.end() - static_cast<std::ptrdiff_t>(want.size()), ids.end());
  EXPECT_EQ(got, want);
  // The GGUF's own tokenizer reads the prompt as llama.cpp did (the reference may keep only
  // its first tokens) and spells the continuation.
  const auto tokenizer = data::load_tokenizer("gguf", GetParam().gguf.string());
  const auto prompt_ids = ref.at("ids").get<std::vector<std::int32_t>>();
  std::vector<std::int32_t> encoded = tokenizer->encode(ref.at("prompt").get<std::string>());
  // encode() never adds bos; llama.cpp does for a model whose add_bos_token is set (Gemma).
  if (!prompt_ids.empty() && prompt_ids.front() == tokenizer->bos_id()) encoded.insert(encoded.begin(), tokenizer->bos_id());
  ASSERT_GE(encoded.size(), prompt_ids.size());
  encoded.resize(prompt_ids.size());
  EXPECT_EQ(encoded, prompt_ids);
  EXPECT_EQ(tokenizer->decode(got), ref.at("greedy_text").get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Models, ImportedGguf, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ModelCase>& info) { return std::string(info.param.name); });

class SmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << kModel.string() << " is absent; run scripts/fetch-models.sh";
  }
};

// Corpus preparation with the model's tokenizer: the shards hold exactly its ids (documents
// separated by its eos), and a reopened folder finds the tokenizer through meta.json.
TEST_F(SmolLM2, PreparedDataUsesTheModelsTokenizer) {
  dark::testing::TempDir tmp;
  const std::string text = "Finetuning reads the 12 tokens of\tthis line.";
  for (int i = 0; i < 3; ++i) dark::testing::write_text(tmp / ("corpus/doc" + std::to_string(i) + ".txt"), text);
  data::DataConfig cfg;
  cfg.sources = {tmp / "corpus"};
  cfg.dir = tmp / "data";
  cfg.tokenizer = data::TokenizerKind::gguf;
  cfg.tokenizer_model = kModel.string();
  cfg.val_fraction = 0.34;
  const data::PreparedData prepared = data::prepare(cfg);
  const auto tokenizer = data::load_tokenizer("gguf", kModel.string());
  EXPECT_EQ(prepared.tokenizer->hash(), tokenizer->hash());
  std::vector<std::int32_t> doc = tokenizer->encode(text);
  doc.push_back(tokenizer->eos_id());
  const auto shard = prepared.open_shard(data::Split::train);
  std::vector<std::int32_t> stored(static_cast<std::size_t>(shard->size()));
  shard->read(0, shard->size(), stored.data());
  ASSERT_EQ(stored.size() % doc.size(), 0u);
  for (std::size_t at = 0; at < stored.size(); at += doc.size())
    EXPECT_EQ(std::vector<std::int32_t>(stored.begin() + at, stored.begin() + at + doc.size()), doc);
  EXPECT_EQ(data::open_prepared(cfg.dir).tokenizer->hash(), tokenizer->hash());
}

}  // namespace
}  // namespace dark::train
