// The tanh-approximated GeGLU (model.mlp "geglu_tanh", Hugging Face's hidden_act
// "gelu_pytorch_tanh", Gemma's) beyond its kernel (tests/test_fused_ops.cpp): the config
// name, the gated MLP against the formula of small ops and by gradcheck, and export-hf /
// import of a model that uses it (hidden_act written and read back, the same logits).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numbers>

#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/file_io.h"
#include "data/tokenizer.h"
#include "nn/layers.h"
#include "tests/test_util.h"
#include "train/config.h"
#include "train/swap/finetune.h"
#include "train/formats/hf_export.h"
#include "train/model_builder.h"

namespace dark::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

RunConfig tiny_geglu_tanh_config() {
  return parse_config(json{{"model",
                            {{"vocab_size", 0}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 4}, {"n_kv_heads", 2},
                             {"d_ff", 64}, {"mlp", "geglu_tanh"}, {"rope_theta", 300.0}}},
                           {"data", {{"tokenizer", "byte"}, {"seq_len", 16}}},
                           {"seed", 5}});
}

TEST(GegluTanhModel, ConfigName) {
  EXPECT_EQ(tiny_geglu_tanh_config().model.mlp, nn::MlpKind::geglu_tanh);
  EXPECT_EQ(enum_name(nn::MlpKind::geglu_tanh), "geglu_tanh");
  dark::testing::expect_error(
      [] { parse_config(json{{"model", {{"mlp", "gelu_tanh"}}}}); },
      {"model.mlp", "gelu_tanh", "geglu_tanh"});  // the error lists the allowed names
}

// down(gelu_tanh(gate(x)) * up(x)) with gelu_tanh written as 0.5 g (1 + tanh(...)).
TEST(GegluTanhModel, GatedMlpMatchesTheFormulaAndGradchecks) {
  nn::GatedMlp mlp(4, 7, nn::MlpKind::geglu_tanh, nn::Init{0.8, 5, "mlp", DType::f64},
                   nn::Init{0.3, 6, "mlp", DType::f64});
  const Tensor x = Tensor::randn({2, 3, 4}, 4, 0, DType::f64);
  {
    NoGradGuard no_grad;
    const Tensor g = mlp.gate_proj.forward(x), up = mlp.up_proj.forward(x);
    const Tensor u = mul_scalar(add(g, mul_scalar(mul(mul(g, g), g), 0.044715)), std::sqrt(2.0 / std::numbers::pi));
    const Tensor want = mlp.down_proj.forward(mul(mul(mul_scalar(g, 0.5), add_scalar(tanh(u), 1.0)), up));
    dark::testing::expect_close(mlp.forward(x), want, 1e-12, 1e-12, "GatedMlp geglu_tanh");
  }
  std::vector<Tensor*> params;
  std::vector<Tensor> inputs = {x};
  for (auto& [name, p] : mlp.named_parameters()) params.push_back(p), inputs.push_back(p->detach().clone());
  for (Tensor& t : inputs) t.set_requires_grad(true);
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        for (std::size_t i = 0; i < params.size(); ++i) *params[i] = in[i + 1];
        return mlp.forward(in[0]);
      },
      inputs);
  EXPECT_TRUE(r.ok) << r.report;
}

// export-hf writes hidden_act "gelu_pytorch_tanh"; importing the folder gives geglu_tanh and
// the same logits, bit for bit.
TEST(GegluTanhModel, ExportAndImportKeepTheActivation) {
  dark::testing::TempDir tmp;
  const data::ByteTokenizer bytes;
  RunConfig config = tiny_geglu_tanh_config();
  config.model.vocab_size = bytes.vocab_size();
  auto model = build_model(config);
  model->train(false);
  const fs::path out = tmp.path() / "hf";
  formats::export_hf(*model, &bytes, out, /*add_bos=*/false);
  EXPECT_EQ(json::parse(read_file(out / "config.json")).at("hidden_act"), "gelu_pytorch_tanh");
  const InitSource source = load_init_source(out.string());
  EXPECT_EQ(source.model.mlp, nn::MlpKind::geglu_tanh);
  RunConfig back_config;
  back_config.model = source.model;
  back_config.data.seq_len = 16;
  back_config.model.max_seq_len = 64;
  auto back = build_model(back_config);
  load_source_weights(*back, source);
  back->train(false);
  NoGradGuard no_grad;
  const Tensor ids = Tensor::from_vector<std::int32_t>({1, 7, 42, 3, 99, 250, 11, 0, 5}, {1, 9});
  EXPECT_EQ(back->forward(ids).to_vector<float>(), model->forward(ids).to_vector<float>());
}

}  // namespace
}  // namespace dark::train
